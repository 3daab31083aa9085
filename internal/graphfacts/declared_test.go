package graphfacts

import (
	"reflect"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// TestProvedDimsWinOverDeclared: dims proved from constants and operators
// win over value_info; a symbolic declared dim never hides a proof, a
// declared number fills an axis nothing proves, and a declaration that
// contradicts a proof is ignored and listed by Overruled.
func TestProvedDimsWinOverDeclared(t *testing.T) {
	b := newBuilder("x") // x: [b, s, 8]
	w := b.init(onnx.NewFloat([]int{8, 8}, make([]float32, 64)))
	proj := b.node("MatMul", []string{"x", w})
	split := b.node("Reshape", []string{proj, b.ints(0, 0, 2, 4)})
	heads := b.node("Transpose", []string{split}, intsAttr("perm", 0, 2, 1, 3))
	wide := b.node("Mul", []string{heads, b.scalar(0.5)})
	declare := func(name string, dims ...onnx.Dim) {
		b.g.ValueInfo = append(b.g.ValueInfo, onnx.MakeValueInfo(name, onnx.Float, dims))
	}
	unk := func(p string) onnx.Dim { return onnx.Dim{Value: -1, Param: p} }
	declare(proj, unk("unk__1"), unk("unk__2"), unk("unk__3"))
	declare(split, unk("unk__4"), onnx.Dim{Value: 128}, unk("unk__5"), unk("unk__6"))                // 128: nothing contradicts it
	declare(heads, onnx.Dim{Value: 1}, onnx.Dim{Value: 4}, onnx.Dim{Value: 128}, onnx.Dim{Value: 2}) // heads and head size swapped
	declare(wide, unk("unk__7"), unk("unk__8"), unk("unk__9"))                                       // wrong rank
	f := b.facts()
	for _, c := range []struct {
		v    string
		want []int64
	}{
		{proj, []int64{-1, -1, 8}},      // the weight's width through a placeholder
		{split, []int64{-1, 128, 2, 4}}, // the constant target through placeholders, 128 declared
		{heads, []int64{-1, 2, 128, 4}}, // the swap ignored
		{wide, []int64{-1, 2, 128, 4}},  // the rank-3 declaration ignored
		{"x", []int64{-1, -1, 8}},       // a graph input: its declaration
	} {
		if got := f.Dims(c.v); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Dims(%s) = %v, want %v", c.v, got, c.want)
		}
	}
	var over []string
	for _, o := range f.Overruled() {
		over = append(over, o.Value)
	}
	if want := []string{wide, heads}; !reflect.DeepEqual(over, want) {
		t.Errorf("Overruled %v, want %v", over, want)
	}
}

// TestBroadcastDims: an elementwise op's output is its inputs' dims
// broadcast; with an input of unknown rank, only sizes other than 1 are
// proved, from the right.
func TestBroadcastDims(t *testing.T) {
	b := newBuilder("x", "mask") // [b,s,8], [b,s]
	bias := b.init(onnx.NewFloat([]int{1, 1, 8}, make([]float32, 8)))
	sum := b.node("Add", []string{bias, "x"})
	unknown := b.node("Relu", []string{b.node("NonZero", []string{"mask"})})
	mixed := b.node("Add", []string{unknown, bias})
	f := b.facts()
	if got, want := f.Dims(sum), []int64{-1, -1, 8}; !reflect.DeepEqual(got, want) {
		t.Errorf("Dims(bias + x) = %v, want %v", got, want)
	}
	if got, want := f.Dims(mixed), []int64{-1, -1, 8}; !reflect.DeepEqual(got, want) {
		t.Errorf("Dims(unknown + bias) = %v, want %v", got, want)
	}
}

// TestComputedWeightWidth: a projection whose weight the graph computes
// from constants and an input that carries no tokens (W + B[t]·A[t], LoRA
// adapters chosen by a scalar task id, as jina-embeddings-v3's export
// has) has the computed weight's width; a product by a value computed
// from the tokens (scores·V) is no projection.
func TestComputedWeightWidth(t *testing.T) {
	b := newBuilder("x", "mask")
	b.g.Input = append(b.g.Input, onnx.MakeValueInfo("task_id", onnx.Int64, []onnx.Dim{}))
	w := b.init(onnx.NewFloat([]int{8, 12}, make([]float32, 96)))
	loraA := b.init(onnx.NewFloat([]int{5, 8, 2}, make([]float32, 80)))
	loraB := b.init(onnx.NewFloat([]int{5, 2, 12}, make([]float32, 120)))
	delta := b.node("MatMul", []string{b.node("Gather", []string{loraA, "task_id"}), b.node("Gather", []string{loraB, "task_id"})})
	adapted := b.node("Add", []string{w, delta})
	proj := b.node("MatMul", []string{"x", adapted})
	// The same product by a weight that reads the tokens' mask.
	masked := b.node("Mul", []string{adapted, b.node("ReduceMax", []string{b.node("Cast", []string{"mask"}, intAttr("to", 1))})})
	tokenProj := b.node("MatMul", []string{"x", masked})
	f := b.facts()
	if got := f.ProjWidth(proj); got != 12 {
		t.Errorf("ProjWidth(x·(W + B[t]·A[t])) = %d, want 12", got)
	}
	if got := f.ProjWidth(tokenProj); got != -1 {
		t.Errorf("ProjWidth(x·(W·max(mask))) = %d, want -1 (the weight reads the tokens)", got)
	}
}
