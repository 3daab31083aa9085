package ops

import "github.com/linearize/linearize/onnx"

// QuantRange returns the saturation range [lo, hi] of a quantized integer
// type (int8, uint8, int16, uint16), as QuantizeLinear saturates to it;
// ok is false for any other type.
func QuantRange(dt onnx.DataType) (lo, hi float64, ok bool) { return qRange(dt) }
