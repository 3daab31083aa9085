package convert

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// extraForm describes one hand-built attention block for the forms of
// issue 12's remaining families (the shapes and sizes of forms_test.go:
// x [B,S,fHid], fH heads of fD).
type extraForm struct {
	name string
	// proj: "" (x·W + b per role), "packed-last" (x·Wqkv + b split on
	// the last axis into Q, K, V), "packed-5d" (x·Wqkv viewed
	// [B,S,3,H,D], split on the 3 and squeezed: ModernBERT), "conv"
	// (pointwise Conv projections of channels-first x, heads split as
	// [B,H,D,S]: SqueezeBERT).
	proj string
	// folded: Q, K, V as [B·H,S,D], a batched product, the scores viewed
	// [B,H,S,S] for the bias and the probabilities [B·H,S,S] for ·V
	// (DeBERTa).
	folded bool
	// bias: "" (none), "mask" (per-key, added), "sub-mask" (per-key,
	// subtracted: Funnel), "sub-const" (a constant subtracted), "band"
	// (|i−j| ≤ w, ModernBERT's local layers), "bucket" (a learned bias
	// per distance bucket: T5), "gated" (that times a sigmoid gate of x:
	// WavLM), "c2p" (folded only: Q·Pᵀ gathered by distance: DeBERTa).
	bias string
	// untransposedQ: Q used as its channels-first split [B,H,D,S] (conv
	// only; a layout the product cannot take).
	untransposedQ bool
	// query: "" (self-attention), "landmark" (Q averaged along the
	// sequence after the head split: Nyströmformer), "pooled" (the Q
	// projection reads x pooled along the sequence: Funnel), "cross" (Q
	// projected from another input y).
	query string
}

// build returns the model of form f; the output is [B,S,fHid].
func (f extraForm) build() *onnxpb.ModelProto {
	const opset = 17
	b := &gb{g: &onnxpb.GraphProto{Name: proto.String(f.name)}, rng: rand.New(rand.NewPCG(5, 6))}
	dyn := []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "seq"}}
	b.g.Input = append(b.g.Input, onnx.MakeValueInfo("x", onnx.Float, append(dyn, onnx.Dim{Value: fHid})))
	if f.bias == "mask" || f.bias == "sub-mask" || f.bias == "alibi-mask" {
		b.g.Input = append(b.g.Input, onnx.MakeValueInfo("mask", onnx.Int64, dyn))
	}
	if f.query == "cross" {
		b.g.Input = append(b.g.Input, onnx.MakeValueInfo("y", onnx.Float, append(dyn, onnx.Dim{Value: fHid})))
	}
	axis := func(a int64) *onnxpb.AttributeProto { return ints0("axis", a) }
	perm := func(p ...int64) *onnxpb.AttributeProto { return ints("perm", p...) }

	// Projections, each [B,S,fHid] (or [B,fHid,S] for conv).
	var pq, pk, pv string
	linear := func(x, role string) string {
		return b.node("Add", []string{b.node("MatMul", []string{x, b.randn("W"+role, fHid, fHid)}), b.randn("b"+role, fHid)})
	}
	xq := "x"
	switch f.query {
	case "pooled":
		xq = b.node("ReduceMean", []string{"x", b.ints(1)}) // [B,1,fHid]
	case "cross":
		xq = "y"
	}
	switch f.proj {
	case "":
		pq, pk, pv = linear(xq, "q"), linear("x", "k"), linear("x", "v")
	case "packed-last":
		p := b.node("Add", []string{b.node("MatMul", []string{"x", b.randn("Wqkv", fHid, 3*fHid)}), b.randn("bqkv", 3*fHid)})
		b.n++
		outs := []string{"q_part", "k_part", "v_part"}
		b.g.Node = append(b.g.Node, &onnxpb.NodeProto{Name: proto.String("split_qkv"), OpType: proto.String("Split"),
			Input: []string{p, b.ints(fHid, fHid, fHid)}, Output: outs, Attribute: []*onnxpb.AttributeProto{axis(-1)}})
		pq, pk, pv = outs[0], outs[1], outs[2]
	case "packed-5d":
		p := b.node("Add", []string{b.node("MatMul", []string{"x", b.randn("Wqkv", fHid, 3*fHid)}), b.randn("bqkv", 3*fHid)})
		p5 := b.node("Reshape", []string{p, b.ints(0, 0, 3, fH, fD)})
		outs := []string{"q_part", "k_part", "v_part"}
		b.g.Node = append(b.g.Node, &onnxpb.NodeProto{Name: proto.String("unbind_qkv"), OpType: proto.String("Split"),
			Input: []string{p5, b.ints(1, 1, 1)}, Output: outs, Attribute: []*onnxpb.AttributeProto{axis(2)}})
		two := b.ints(2)
		pq, pk, pv = b.node("Squeeze", []string{outs[0], two}), b.node("Squeeze", []string{outs[1], two}), b.node("Squeeze", []string{outs[2], two})
	case "conv":
		xc := b.node("Transpose", []string{"x"}, perm(0, 2, 1)) // [B,fHid,S]
		conv := func(role string) string {
			return b.node("Conv", []string{xc, b.randn("W"+role, fHid, fHid, 1), b.randn("b"+role, fHid)},
				ints("kernel_shape", 1), ints("strides", 1), ints("pads", 0, 0), ints("dilations", 1))
		}
		pq, pk, pv = conv("q"), conv("k"), conv("v")
	}

	// Heads: q [B,H,S,D] (or [B·H,S,D] folded), kT [B,H,D,S], v [B,H,S,D].
	var q, kT, v string
	switch {
	case f.proj == "conv":
		split := func(p string) string { return b.node("Reshape", []string{p, b.ints(0, fH, fD, -1)}) } // [B,H,D,S]
		q = b.node("Transpose", []string{split(pq)}, perm(0, 1, 3, 2))
		if f.untransposedQ {
			q = split(pq)
		}
		kT = split(pk)
		v = b.node("Transpose", []string{split(pv)}, perm(0, 1, 3, 2))
	case f.proj == "packed-5d":
		q = b.node("Transpose", []string{pq}, perm(0, 2, 1, 3))
		kT = b.node("Transpose", []string{pk}, perm(0, 2, 3, 1))
		v = b.node("Transpose", []string{pv}, perm(0, 2, 1, 3))
	default:
		split := func(p string) string { return b.node("Reshape", []string{p, b.ints(0, 0, fH, fD)}) }
		q = b.node("Transpose", []string{split(pq)}, perm(0, 2, 1, 3))
		kT = b.node("Transpose", []string{split(pk)}, perm(0, 2, 3, 1))
		v = b.node("Transpose", []string{split(pv)}, perm(0, 2, 1, 3))
	}
	if f.query == "landmark" {
		q = b.node("ReduceMean", []string{q, b.ints(2)}) // one landmark: the mean query
	}
	if f.folded {
		q = b.node("Reshape", []string{q, b.ints(-1, fS, fD)})
		kT = b.node("Transpose", []string{b.node("Reshape", []string{b.node("Transpose", []string{kT}, perm(0, 1, 3, 2)), b.ints(-1, fS, fD)})}, perm(0, 2, 1))
		v = b.node("Reshape", []string{v, b.ints(-1, fS, fD)})
	}

	s := b.node("Div", []string{b.node("MatMul", []string{q, kT}), b.scalar(float32(math.Sqrt(fD)))})
	if f.folded {
		if f.bias == "c2p" {
			// Q·Pᵀ against relative-position keys, gathered by distance.
			pkT := b.randn("pos_key_t", fD, 2*fS)
			idx := make([]int64, fB*fH*fS*fS)
			for i := range idx {
				r, c := (i/fS)%fS, i%fS
				idx[i] = int64(r - c + fS)
			}
			gi := b.init("c2p_index", onnx.NewInt64([]int{fB * fH, fS, fS}, idx))
			c2p := b.node("GatherElements", []string{b.node("MatMul", []string{q, pkT}), gi}, axis(-1))
			s = b.node("Add", []string{s, c2p})
		}
		s = b.node("Reshape", []string{s, b.ints(-1, fH, fS, fS)})
	}
	seqRange := func() (string, string) {
		n := b.node("Squeeze", []string{b.node("Slice", []string{b.node("Shape", []string{"x"}), b.ints(1), b.ints(2), b.ints(0)}), b.ints(0)})
		r := b.node("Range", []string{b.init("zero_i", onnx.NewInt64([]int{}, []int64{0})), n, b.init("one_i", onnx.NewInt64([]int{}, []int64{1}))})
		return b.unsqueeze(r, 1, opset), b.unsqueeze(r, 0, opset)
	}
	keyMask := func(c float32) string {
		m := b.unsqueeze(b.unsqueeze("mask", 1, opset), 2, opset)
		return b.node("Mul", []string{b.node("Sub", []string{b.scalar(1), b.node("Cast", []string{m}, ints0("to", int64(onnx.Float)))}), b.scalar(c)})
	}
	bucket := func() string {
		i, j := seqRange()
		dist := b.node("Min", []string{b.node("Abs", []string{b.node("Sub", []string{i, j})}), b.init("max_bucket", onnx.NewInt64([]int{}, []int64{3}))})
		rel := b.node("Gather", []string{b.randn("rel_bias_table", 4, fH), dist}) // [S,S,H]
		return b.unsqueeze(b.node("Transpose", []string{rel}, perm(2, 0, 1)), 0, opset)
	}
	switch f.bias {
	case "mask":
		s = b.node("Add", []string{s, keyMask(-10000)})
	case "sub-mask":
		s = b.node("Sub", []string{s, keyMask(10000)})
	case "sub-const":
		s = b.node("Sub", []string{s, b.scalar(3)})
	case "sub-huge":
		s = b.node("Sub", []string{s, b.scalar(1e30)})
	case "band":
		i, j := seqRange()
		far := b.node("Greater", []string{b.node("Abs", []string{b.node("Sub", []string{i, j})}), b.init("window", onnx.NewInt64([]int{}, []int64{1}))})
		s = b.node("Add", []string{s, b.node("Where", []string{far, b.scalar(-math.MaxFloat32), b.scalar(0)})})
	case "causal-window":
		// Mistral-style: j ≤ i and i − j < 3, from Range comparisons.
		i, j := seqRange()
		keep := b.node("And", []string{b.node("LessOrEqual", []string{j, i}),
			b.node("Less", []string{b.node("Sub", []string{i, j}), b.init("w3", onnx.NewInt64([]int{}, []int64{3}))})})
		s = b.node("Add", []string{s, b.node("Where", []string{keep, b.scalar(0), b.scalar(-math.MaxFloat32)})})
	case "band-const":
		// A band ±1 stored as a constant [9,9] (a fixed-length export).
		const n = 9
		d := make([]float32, n*n)
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if i-j > 1 || j-i > 1 {
					d[i*n+j] = -math.MaxFloat32
				}
			}
		}
		s = b.node("Add", []string{s, b.init("band_table", onnx.NewFloat([]int{n, n}, d))})
	case "alibi", "alibi-band", "alibi-mask":
		// jina-embeddings-v2: −m_h·|i−j| per head, slopes 2^(−8(h+1)/H).
		i, j := seqRange()
		dist := b.node("Cast", []string{b.node("Abs", []string{b.node("Sub", []string{i, j})})}, ints0("to", int64(onnx.Float)))
		m := make([]float32, fH)
		for h := range m {
			m[h] = float32(math.Pow(2, -8*float64(h+1)/fH))
		}
		bias := b.node("Mul", []string{b.init("neg_slopes", onnx.NewFloat([]int{1, fH, 1, 1}, negated(m))), dist})
		switch f.bias {
		case "alibi-band":
			far := b.node("Greater", []string{b.node("Abs", []string{b.node("Sub", []string{i, j})}), b.init("window", onnx.NewInt64([]int{}, []int64{1}))})
			bias = b.node("Add", []string{bias, b.node("Where", []string{far, b.scalar(-math.MaxFloat32), b.scalar(0)})})
		case "alibi-mask":
			bias = b.node("Add", []string{bias, keyMask(-10000)})
		}
		s = b.node("Add", []string{s, bias})
	case "bucket":
		s = b.node("Add", []string{s, bucket()})
	case "gated":
		gate := b.node("Sigmoid", []string{b.node("MatMul", []string{"x", b.randn("Wgate", fHid, fH)})}) // [B,S,H]
		gate = b.unsqueeze(b.node("Transpose", []string{gate}, perm(0, 2, 1)), 3, opset)                 // [B,H,S,1]
		s = b.node("Add", []string{s, b.node("Mul", []string{gate, bucket()})})
	}
	p := b.node("Softmax", []string{s}, axis(-1))
	if f.folded {
		p = b.node("Reshape", []string{p, b.ints(-1, fS, fS)})
	}
	o := b.node("MatMul", []string{p, v})
	var out string
	switch {
	case f.folded:
		o = b.node("Reshape", []string{o, b.ints(-1, fH, fS, fD)})
		out = b.node("Reshape", []string{b.node("Transpose", []string{o}, perm(0, 2, 1, 3)), b.ints(0, 0, fHid)})
	case f.proj == "conv":
		oc := b.node("Reshape", []string{b.node("Transpose", []string{o}, perm(0, 1, 3, 2)), b.ints(0, fHid, -1)}) // [B,fHid,S]
		out = b.node("Transpose", []string{oc}, perm(0, 2, 1))
	default:
		out = b.node("Reshape", []string{b.node("Transpose", []string{o}, perm(0, 2, 1, 3)), b.ints(0, 0, fHid)})
	}
	b.g.Output = append(b.g.Output, onnx.MakeValueInfo(out, onnx.Float, nil))
	return &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: b.g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}}}
}

// TestMatcherFormsExtra: the forms of issue 12's remaining families, each
// found with the heads, head size and scale it was built with; the
// convertible ones convert exactly (Linformer with k = S, E = F = I) and
// keep padding out, the others are refused with a reason that names
// what they are.
func TestMatcherFormsExtra(t *testing.T) {
	want := 1 / math.Sqrt(fD)
	for _, c := range []struct {
		f      extraForm
		reason string // "" = convertible; else a substring of Reason
	}{
		// ModernBERT's local layers: a band |i−j| ≤ w added to the scores.
		// A band |i−j| ≤ w: a window block, exact as WindowAttention.
		{extraForm{name: "sliding-window-band", bias: "band"}, "sliding-window attention (band ±1)"},
		// Packed QKV projections split into Q, K, V.
		{extraForm{name: "packed-qkv-split-last-axis", proj: "packed-last", bias: "mask"}, ""},
		{extraForm{name: "packed-qkv-unbind-5d", proj: "packed-5d", bias: "mask"}, ""},
		// SqueezeBERT: pointwise Conv projections, heads split [B,H,D,S].
		{extraForm{name: "channels-first-conv-projections", proj: "conv", bias: "mask"}, ""},
		{extraForm{name: "channels-first-conv-no-mask", proj: "conv"}, ""},
		// Funnel: the mask subtracted; a constant subtracted is a shift.
		{extraForm{name: "mask-subtracted", bias: "sub-mask"}, "subtracted from the scores"},
		{extraForm{name: "constant-subtracted", bias: "sub-const"}, ""},
		// DeBERTa: heads folded into the batch, with and without c2p;
		// without, the output is unfolded by a view [B,H,S,D] and the
		// block converts over the operands viewed so.
		{extraForm{name: "folded-heads-bmm", folded: true}, ""},
		{extraForm{name: "folded-heads-c2p", folded: true, bias: "c2p"}, "disentangled attention"},
		// T5-style learned buckets; WavLM's gated version of them.
		{extraForm{name: "relative-bucket-bias", bias: "bucket"}, "relative position bias"},
		{extraForm{name: "gated-relative-bias", bias: "gated"}, "gated relative position bias"},
		// Not self-attention: landmark queries, pooled queries, another input.
		{extraForm{name: "landmark-queries", query: "landmark", bias: "mask"}, "the queries are pooled along the sequence by ReduceMean"},
		{extraForm{name: "pooled-query-input", query: "pooled"}, "the queries are pooled along the sequence by ReduceMean"},
		// Cross-attention: Performer and Linformer convert it (Block.Cross).
		{extraForm{name: "cross-attention", query: "cross"}, ""},
	} {
		t.Run(c.f.name, func(t *testing.T) {
			m := c.f.build()
			d, err := Detect(m)
			if err != nil {
				t.Fatal(err)
			}
			if d.Count() != 1 {
				t.Fatalf("found %d blocks, want 1\n%s", d.Count(), d.Explain())
			}
			bl := d.Blocks[0]
			if bl.Heads != fH || bl.HeadDim != fD || math.Abs(bl.Scale-want) > 1e-6 {
				t.Errorf("heads %d head_dim %d scale %g, want %d %d %g", bl.Heads, bl.HeadDim, bl.Scale, fH, fD, want)
			}
			if c.reason != "" {
				if bl.Convertible || !strings.Contains(bl.Reason, c.reason) {
					t.Fatalf("convertible %v reason %q, want a refusal with %q", bl.Convertible, bl.Reason, c.reason)
				}
				_, rep, err := ToPerformer(m, PerformerOptions{Features: 8, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
				switch {
				case bl.Window != nil:
					// Every conversion writes WindowAttention for it.
					if err != nil || len(rep.Converted) != 1 || rep.Converted[0].Op != ops.WindowOp {
						t.Errorf("ToPerformer on a window block: %v, %+v", err, rep)
					}
				case err == nil:
					t.Errorf("ToPerformer converted a refused block")
				}
				return
			}
			if !bl.Convertible {
				t.Fatalf("not convertible: %s\n%s", bl.Reason, d.Explain())
			}
			for _, p := range []struct {
				role string
				got  *Projection
			}{{"q", bl.QProj}, {"k", bl.KProj}, {"v", bl.VProj}} {
				if p.got == nil {
					t.Fatalf("%s projection not proved", p.role)
				}
				switch c.f.proj {
				case "packed-last", "packed-5d":
					if !p.got.Packed || p.got.Weight != "Wqkv" || p.got.Bias != "bqkv" {
						t.Errorf("%s projection %+v, want packed x·Wqkv + bqkv", p.role, p.got)
					}
				case "conv":
					if !p.got.Conv || p.got.Weight != "W"+p.role || p.got.Bias != "b"+p.role {
						t.Errorf("%s projection %+v, want a pointwise Conv by W%s + b%s", p.role, p.got, p.role, p.role)
					}
				}
			}
			if bl.Merged != m.Graph.Output[0].GetName() {
				t.Errorf("merged output %q, want %q", bl.Merged, m.Graph.Output[0].GetName())
			}
			if bl.Cross != (c.f.query == "cross") {
				t.Fatalf("cross %v, want %v", bl.Cross, c.f.query == "cross")
			}
			if bl.Cross {
				return // its conversion is TestFormsConvert's (t5_cross_attention.onnx)
			}
			masked := c.f.bias == "mask"
			if want := map[bool]BiasKind{true: BiasPerKey, false: BiasNone}[masked]; bl.Bias != want {
				t.Errorf("bias %s, want %s", bl.Bias, want)
			}
			checkConversion(t, m, masked)
			checkCoreRemoved(t, m, d)
		})
	}
}

// TestPackedQKVSharedWeight: the three roles of a packed QKV projection
// are proved from one node and one weight (marked Packed), so a fit that
// reads them cannot take them for three separate weights.
func TestPackedQKVSharedWeight(t *testing.T) {
	m := extraForm{name: "packed", proj: "packed-last", bias: "mask"}.build()
	d, err := Detect(m)
	if err != nil || d.Count() != 1 {
		t.Fatalf("detect: %v\n%s", err, d.Explain())
	}
	bl := d.Blocks[0]
	if bl.QProj.Node != bl.KProj.Node || bl.KProj.Node != bl.VProj.Node {
		t.Errorf("packed projections from different nodes: %s %s %s", bl.QProj.Node, bl.KProj.Node, bl.VProj.Node)
	}
}

// TestExplainFurthestExtra: the tracer's furthest failure for the new
// forms' checks, as --explain prints it.
func TestExplainFurthestExtra(t *testing.T) {
	for _, c := range []struct {
		f    extraForm
		want string
	}{
		{extraForm{name: "channels-first-q-untransposed", proj: "conv", untransposedQ: true}, "Q is its head split [B,H,D,S] (channels-first) untransposed; the attention product needs perm [0 1 3 2]"},
		{extraForm{name: "every-key-subtracted", bias: "sub-huge"}, "from every score: every key is masked"},
	} {
		t.Run(c.f.name, func(t *testing.T) { checkExplainFurthest(t, c.f.build(), c.want) })
	}
}

func negated(m []float32) []float32 {
	out := make([]float32, len(m))
	for i, x := range m {
		out[i] = -x
	}
	return out
}
