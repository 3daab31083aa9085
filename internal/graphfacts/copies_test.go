package graphfacts

import (
	"math"
	"reflect"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// TestCopies: NomicBERT's attention, as its TorchScript export writes it.
// The packed projection x·Wqkv viewed [B,S,3,H,D] is gathered into q, k,
// v along axis 2; q and k go through apply_rotary_emb,
// cat((rotary(x[..., :ro_dim]), x[..., ro_dim:]), -1) with ro_dim =
// 2·cos.size(1) the whole head, so the tail is empty (q is scaled on the
// way, x[..., :ro_dim]·s); the three are stacked again (torch.stack(dim=2):
// a Concat of Unsqueezes) and re-selected with qkv[:, :, i]. The
// selection is a copy of the stacked tensor i (with a negative index and
// axis too, not with an index of shape [1] or along another axis), the
// Concat a copy of the rotated head (not when the tail has elements, nor
// when only a declaration says it is empty), and the walks to the
// projection (ProjectionOf, PreScale) pass both.
func TestCopies(t *testing.T) {
	b := newBuilder("x")
	const d = 4 // head size; 2 heads
	w := b.init(onnx.NewFloat([]int{8, 24}, make([]float32, 192)))
	p := b.node("MatMul", []string{"x", w})
	qkv := b.node("Reshape", []string{p, b.ints(0, 0, 3, 2, d)})
	idx := func(i int64) string { return b.init(onnx.NewInt64(nil, []int64{i})) }
	part := func(v string, i int64, axis int64) string {
		return b.node("Gather", []string{v, idx(i)}, intAttr("axis", axis))
	}
	// ro_dim = cos.size(1)·2 of a [S', D/2] table: D, folded.
	table := b.init(onnx.NewFloat([]int{16, d / 2}, make([]float32, 16*d/2)))
	ro := b.node("Unsqueeze", []string{b.node("Mul", []string{part(b.node("Shape", []string{table}), 1, 0), idx(2)}), b.ints(0)})
	cos, sin := b.init(onnx.NewFloat([]int{d}, make([]float32, d))), b.init(onnx.NewFloat([]int{d}, make([]float32, d)))
	var tail, rotated string
	rotary := func(v string, scaled bool) string {
		xr := b.node("Slice", []string{v, b.ints(0), ro, b.ints(-1), b.ints(1)})
		if scaled {
			xr = b.node("Mul", []string{xr, b.scalar(0.5)})
		}
		x1 := b.node("Slice", []string{xr, b.ints(0), b.ints(d / 2), b.ints(-1)})
		x2 := b.node("Slice", []string{xr, b.ints(d / 2), b.ints(d), b.ints(-1)})
		half := b.node("Concat", []string{b.node("Neg", []string{x2}), x1}, intAttr("axis", -1))
		rotated = b.node("Add", []string{b.node("Mul", []string{xr, cos}), b.node("Mul", []string{half, sin})})
		tail = b.node("Slice", []string{v, ro, b.ints(math.MaxInt64), b.ints(-1), b.ints(1)})
		return b.node("Concat", []string{rotated, tail}, intAttr("axis", -1))
	}
	qr := rotary(part(qkv, 0, 2), true)
	kr := rotary(part(qkv, 1, 2), false)
	v0 := part(qkv, 2, 2)
	st := b.node("Concat", []string{b.node("Unsqueeze", []string{qr, b.ints(2)}), b.node("Unsqueeze", []string{kr, b.ints(2)}), b.node("Unsqueeze", []string{v0, b.ints(2)})}, intAttr("axis", 2))
	q0, vl := part(st, 0, 2), part(st, -1, -3)
	q := b.node("Transpose", []string{q0}, intsAttr("perm", 0, 2, 1, 3))
	k := b.node("Transpose", []string{part(st, 1, 2)}, intsAttr("perm", 0, 2, 3, 1))
	v := b.node("Transpose", []string{vl}, intsAttr("perm", 0, 2, 1, 3))
	// Not copies: an index of shape [1] keeps the stacked axis; a
	// selection along another axis; a tail of two elements; a tail only
	// declared empty.
	kept := b.node("Gather", []string{st, b.ints(0)}, intAttr("axis", 2))
	across := part(st, 0, 1)
	wide := b.node("Concat", []string{rotated, b.node("Slice", []string{part(qkv, 1, 2), b.ints(d / 2), b.ints(math.MaxInt64), b.ints(-1)})}, intAttr("axis", -1))
	b.g.Input = append(b.g.Input, onnx.MakeValueInfo("e", onnx.Float, []onnx.Dim{{Value: -1}, {Value: -1}, {Value: 2}, {Value: 0}}))
	declared := b.node("Concat", []string{rotated, "e"}, intAttr("axis", -1))
	f := b.facts()

	if got := f.Dims(tail); !reflect.DeepEqual(got, []int64{-1, -1, 2, 0}) {
		t.Errorf("Dims(x[..., ro_dim:]) = %v, want [-1 -1 2 0]", got)
	}
	for _, c := range []struct {
		name, v, want string
	}{
		{"stack[:, :, 0]", q0, qr},
		{"stack[:, :, -1] (axis -3)", vl, v0},
		{"cat(rotary, empty tail)", kr, rotated},
		{"stack[:, :, [0]]", kept, ""},
		{"stack[:, 0]", across, ""},
		{"cat(rotary, two-element tail)", wide, ""},
		{"cat(rotary, declared-empty input)", declared, ""},
	} {
		if got := f.CopyOf(c.v); got != c.want {
			t.Errorf("CopyOf(%s) = %q, want %q", c.name, got, c.want)
		}
	}
	for name, x := range map[string]string{"q": q, "k": k, "v": v} {
		proj, ok := f.ProjectionOf(x)
		if !ok || !proj.Packed || proj.Weight != w || proj.Input != "x" {
			t.Errorf("ProjectionOf(%s) = %+v, %v; want a part of the packed x·%s", name, proj, ok, w)
		}
	}
	if s := f.PreScale(q); s != 0.5 {
		t.Errorf("PreScale(q) = %v, want 0.5 (applied before the rotation, the cat and the stack)", s)
	}
	if got := f.Dims(q); !reflect.DeepEqual(got, []int64{-1, 2, -1, d}) {
		t.Errorf("Dims(q) = %v, want [-1 2 -1 %d]", got, d)
	}
}
