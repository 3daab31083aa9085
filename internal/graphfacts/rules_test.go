package graphfacts

import (
	"reflect"
	"testing"

	"github.com/linearize/linearize/onnx"
	"google.golang.org/protobuf/proto"
)

// in sets the domain of the node that produced v.
func (b *builder) in(domain, v string) string {
	for _, n := range b.g.Node {
		if n.Output[0] == v {
			n.Domain = proto.String(domain)
		}
	}
	return v
}

// TestRulesByDomain: the rules are keyed by domain as well as op type:
// "ai.onnx" is the default domain, com.microsoft's fused Gelu keeps its
// input's shape and its QuantizeLinear saturates to int8's range, while
// an op of the same name in another domain has no rule.
func TestRulesByDomain(t *testing.T) {
	b := newBuilder("x")
	msGelu := b.in(msDomain, b.node("Gelu", []string{"x"}))
	otherGelu := b.in("ai.linearize", b.node("Gelu", []string{"x"}))
	sqrt := b.in("ai.onnx", b.node("Sqrt", []string{b.scalar(9)}))
	msSqrt := b.in(msDomain, b.node("Sqrt", []string{b.scalar(9)}))
	zp := b.init(&onnx.Tensor{DType: onnx.Int8, Shape: []int{}, Data: []int8{0}})
	// round(100/0.5) = 200 saturates to int8's 127; round(3/0.5) = 6.
	sat := b.in(msDomain, b.node("QuantizeLinear", []string{b.scalar(100), b.scalar(0.5), zp}))
	q := b.in(msDomain, b.node("QuantizeLinear", []string{b.scalar(3), b.scalar(0.5), zp}))
	f := b.facts()
	if got := f.Dims(msGelu); !reflect.DeepEqual(got, []int64{-1, -1, 8}) {
		t.Errorf("Dims(com.microsoft Gelu(x)) = %v, want x's [-1 -1 8]", got)
	}
	if got := f.Dims(otherGelu); got != nil {
		t.Errorf("Dims(ai.linearize Gelu(x)) = %v, want unknown", got)
	}
	if v, ok := f.Scalar(sqrt); !ok || v != 3 {
		t.Errorf("Scalar(ai.onnx Sqrt(9)) = %v, %v; want 3", v, ok)
	}
	if v, ok := f.Scalar(msSqrt); ok {
		t.Errorf("Scalar(com.microsoft Sqrt(9)) = %v, want unknown", v)
	}
	if v, ok := f.Scalar(sat); !ok || v != 127 {
		t.Errorf("Scalar(QuantizeLinear(100, 0.5, int8 0)) = %v, %v; want 127", v, ok)
	}
	if v, ok := f.Scalar(q); !ok || v != 6 {
		t.Errorf("Scalar(QuantizeLinear(3, 0.5, int8 0)) = %v, %v; want 6", v, ok)
	}
}
