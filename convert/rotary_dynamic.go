package convert

import (
	"fmt"
	"slices"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// dynamic rewrites the graph so that the frequencies f_i are scaled by
// g^(−2i/(d−2)), g = max(1, s·n/L − (s−1)), where n is one more than the
// largest position the frequencies are multiplied by (transformers'
// dynamic NTK: θ' = θ·g^(d/(d−2))). For n ≤ L, g is 1 and every
// frequency is multiplied by exactly 1.
func (f *rotaryFreq) dynamic(g *onnxpb.GraphProto, ix *onnx.Index, s float64, trained int) error {
	if f.tensor.DType != onnx.Float {
		return fmt.Errorf("convert: extend positions: method dynamic needs float32 rotary frequencies; %s holds %s (use ntk, linear or yarn)", f.value, f.tensor.DType)
	}
	pos, err := f.positions(ix)
	if err != nil {
		return err
	}
	types := newElemTypes(ix)
	if dt := types.of(pos); dt != onnx.Float {
		return fmt.Errorf("convert: extend positions: method dynamic: the positions %s the frequencies %s multiply are %s, not float32 (use ntk, linear or yarn)", pos, f.value, dt)
	}
	k := len(f.freqs)
	exps := make([]float64, k)
	for i := range exps {
		exps[i] = -float64(2*i) / float64(2*k-2)
	}
	p := f.value + "/linearize_dynamic"
	consts := []struct {
		name string
		t    *onnx.Tensor
	}{
		{p + "/one", onnx.NewFloat([]int{}, []float32{1})},
		{p + "/slope", onnx.NewFloat([]int{}, []float32{float32(s / float64(trained))})},
		{p + "/shift", onnx.NewFloat([]int{}, []float32{float32(s - 1)})},
		{p + "/exponents", onnx.NewFloat(slices.Clone(f.tensor.Shape), toFloat32s(exps))},
	}
	for _, c := range consts {
		tp, err := onnx.EncodeTensor(c.name, c.t)
		if err != nil {
			return fmt.Errorf("convert: extend positions: %w", err)
		}
		g.Initializer = append(g.Initializer, tp)
	}
	node := func(op, out string, in ...string) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(out), Input: in, Output: []string{out}}
	}
	keep := &onnxpb.AttributeProto{Name: proto.String("keepdims"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)}
	reduce := node("ReduceMax", p+"/max_position", pos)
	reduce.Attribute = []*onnxpb.AttributeProto{keep}
	scaled := p + "/frequencies"
	nodes := []*onnxpb.NodeProto{
		reduce,
		node("Add", p+"/length", p+"/max_position", p+"/one"),
		node("Mul", p+"/stretched", p+"/length", p+"/slope"),
		node("Sub", p+"/ratio", p+"/stretched", p+"/shift"),
		node("Max", p+"/g", p+"/ratio", p+"/one"),
		node("Pow", p+"/scale", p+"/g", p+"/exponents"),
		node("Mul", scaled, f.value, p+"/scale"),
	}
	for _, c := range ix.Consumers[f.value] {
		for i, in := range c.Input {
			if in == f.value {
				c.Input[i] = scaled
			}
		}
	}
	// The new nodes run right after the positions and the frequencies
	// are made (before anything reads the scaled frequencies: their
	// readers read both).
	at := 0
	for _, v := range []string{pos, f.value} {
		if p := ix.Producer[v]; p != nil {
			at = max(at, slices.Index(g.Node, p)+1)
		}
	}
	g.Node = slices.Insert(g.Node, at, nodes...)
	return nil
}

// positions returns the value the frequencies are multiplied by: the
// other operand of the first Mul or MatMul on the way from the frequency
// constant to Cos, one that is no constant (the positions, as floats).
func (f *rotaryFreq) positions(ix *onnx.Index) (string, error) {
	from := map[string]bool{f.value: true}
	frontier := []string{f.value}
	for depth := 0; depth < 6 && len(frontier) > 0; depth++ {
		var next []string
		for _, v := range frontier {
			for _, c := range ix.Consumers[v] {
				op := c.GetOpType()
				if (op == "Mul" || op == "MatMul") && len(c.Input) == 2 {
					other := c.Input[0]
					if from[other] {
						other = c.Input[1]
					}
					if !from[other] && ix.Initializers[other] == nil && !isConstantOutput(ix, other) {
						return other, nil
					}
				}
				for _, o := range c.Output {
					if !from[o] {
						from[o] = true
						next = append(next, o)
					}
				}
			}
		}
		frontier = next
	}
	return "", fmt.Errorf("convert: extend positions: method dynamic: no product of the rotary frequencies %s with the positions found (use ntk, linear or yarn)", f.value)
}

// isConstantOutput reports whether v is the output of a Constant node.
func isConstantOutput(ix *onnx.Index, v string) bool {
	p := ix.Producer[v]
	return p != nil && p.GetOpType() == "Constant"
}
