package kernels_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"

	// FuzzKernels covers linearize's own ops too, which register here.
	_ "github.com/linearize/linearize/ops"
)

// byteSource reads choices from fuzz data, then zeros once it runs out.
type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) next() byte {
	if s.i >= len(s.b) {
		return 0
	}
	s.i++
	return s.b[s.i-1]
}

// intn returns a choice in [0, n).
func (s *byteSource) intn(n int) int { return int(s.next()) % n }

// wide returns a signed value that is usually small and sometimes huge, so
// that value-driven shapes (Expand, Tile, Range, ConstantOfShape, Pad)
// ask for absurd sizes.
func (s *byteSource) wide() int64 {
	v := int64(s.next()) - 4
	switch s.intn(8) {
	case 6:
		v <<= 20
	case 7:
		v <<= 40
	}
	return v
}

func (s *byteSource) tensor() *onnx.Tensor {
	shape := make([]int, s.intn(5))
	for i := range shape {
		shape[i] = s.intn(5)
	}
	n := onnx.NumElements(shape)
	switch s.intn(6) {
	case 0:
		d := make([]int64, n)
		for i := range d {
			d[i] = s.wide()
		}
		return onnx.NewInt64(shape, d)
	case 1:
		d := make([]bool, n)
		for i := range d {
			d[i] = s.next()&1 == 1
		}
		return &onnx.Tensor{DType: onnx.Bool, Shape: shape, Data: d}
	case 2:
		d := make([]uint16, n)
		for i := range d {
			d[i] = uint16(s.next())<<8 | uint16(s.next())
		}
		return &onnx.Tensor{DType: onnx.Float16, Shape: shape, Data: d}
	case 3:
		d := make([]int8, n)
		for i := range d {
			d[i] = int8(s.next())
		}
		return &onnx.Tensor{DType: onnx.Int8, Shape: shape, Data: d}
	default:
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(int8(s.next())) / 16
			if s.intn(32) == 0 {
				d[i] = float32([]float64{math.NaN(), math.Inf(1), -1e30}[s.intn(3)])
			}
		}
		return onnx.NewFloat(shape, d)
	}
}

func (s *byteSource) attrs() []*onnxpb.AttributeProto {
	var a []*onnxpb.AttributeProto
	for _, name := range []string{"axis", "keepdims", "to", "k", "num_heads", "block", "segments", "reach", "causal", "group", "transA", "upper", "exclusive", "block_size"} {
		if s.intn(4) == 0 {
			a = append(a, kAttr(name, int(s.wide())))
		}
	}
	for _, name := range []string{"axes", "perm", "split", "pads", "strides", "kernel_shape", "dilations", "output_padding"} {
		if s.intn(5) == 0 {
			v := make([]int64, s.intn(5))
			for i := range v {
				v[i] = s.wide()
			}
			a = append(a, kAttr(name, v))
		}
	}
	if s.intn(5) == 0 {
		a = append(a, kAttr("scale", float32(int8(s.next()))/8))
	}
	return a
}

// FuzzKernels runs a registered kernel (every domain: standard ops,
// com.microsoft and linearize's own) on inputs, attributes and opsets
// drawn from the fuzz data, under a 1 MiB tensor budget. A kernel may
// refuse anything, but it must not panic, and no allocation the inputs
// drive may get past the budget: absurd value-driven shapes are refused
// before they are allocated, so the fuzzer's memory stays flat.
func FuzzKernels(f *testing.F) {
	names := kernels.Supported()
	for _, seed := range [][]byte{
		{0, 1, 2, 3, 4, 5, 6, 7},
		[]byte("expand a huge shape please"),
		{255, 254, 7, 7, 7, 7, 7, 7, 7, 7, 0, 0, 1, 2, 3},
	} {
		f.Add(seed)
	}
	prev := kernels.SetMaxTensorBytes(1 << 20)
	f.Cleanup(func() { kernels.SetMaxTensorBytes(prev) })
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{b: data}
		name := names[(int(s.next())<<8|int(s.next()))%len(names)]
		domain, op, _ := strings.Cut(name, ":")
		opset := []int64{1, 9, 11, 13, 17, 18, 21}[s.intn(7)]
		k, err := kernels.Lookup(domain, op, opset)
		if err != nil {
			return
		}
		in := make([]*onnx.Tensor, s.intn(6))
		for i := range in {
			if s.intn(8) > 0 {
				in[i] = s.tensor()
			}
		}
		n := kNode(op, 1+s.intn(3), s.attrs()...)
		n.Domain = &domain
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s opset %d attrs %v inputs %v: panic: %v", name, opset, n.Attribute, fmt.Sprint(in), r)
				}
			}()
			out, err := k(&kernels.Context{Node: n, Opset: opset, Threads: 2}, in)
			if err != nil {
				return
			}
			for _, o := range out {
				if o != nil && int64(o.Len())*int64(max(1, onnx.ElemSize(o.DType))) > 1<<20 {
					t.Fatalf("%s: output %v of %d elements passed the 1 MiB budget", name, o.Shape, o.Len())
				}
			}
		}()
	})
}
