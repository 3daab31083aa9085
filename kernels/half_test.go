package kernels_test

import (
	"testing"

	"github.com/linearize/linearize/onnx"
)

// TestPowFloatBaseHalfExponent: Pow's output has the base's type. A
// float32 base with a float16 exponent used to come back as bfloat16 bits
// in a tensor typed float32 (the half path narrowed to the first input's
// type whatever it was); the closed form 2^3 = 8 says which.
func TestPowFloatBaseHalfExponent(t *testing.T) {
	base := onnx.NewFloat([]int{2}, []float32{2, 3})
	exp := &onnx.Tensor{DType: onnx.Float16, Shape: []int{2}, Data: []uint16{onnx.FloatToHalf(3), onnx.FloatToHalf(2)}}
	out, err := kTry(kNode("Pow", 1), 15, base, exp)
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0]; got.DType != onnx.Float || got.Floats() == nil || got.Floats()[0] != 8 || got.Floats()[1] != 9 {
		t.Errorf("Pow([2 3] float32, [3 2] float16) = %v %v, want float32 [8 9]", got, got.Data)
	}
}
