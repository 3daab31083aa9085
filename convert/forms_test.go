package convert

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// form describes one hand-built attention block, for the forms the corpus
// and the exporter fixtures lack.
type form struct {
	name  string
	opset int64
	k     string // "0231", "twostep", "einsum", "einsum-swapped"
	scale string // "div", "mul", "q", "split", "none"; "div-after", "mul-after": (QKᵀ + mask)·scale;
	// "pre": q_proj(x)·scaling before the head split; "rotary": that, then
	// rotary embeddings on Q and K; "div-input": Div by a graph input
	cast        string // "probs": Cast(float) after the Softmax; "both": before it too
	scoresFirst bool   // Add(scores, mask) instead of Add(mask, scores)
	mask        string // "add", "where", "none", "isnan", "trilu", "float" (a float [B,S] bias input),
	// "alltrue-add", "alltrue-where" (a constant all-true condition, no mask input),
	// "expand-add" (bias.expand_as(scores)), "expand-where" (Expand of the condition to [B,H,S,S]),
	// "const-shift" (−10000 added to every score), "const-masked" (−1e30 added to every score)
	axis   int64 // Softmax axis attribute; 0 means absent
	expose bool  // make the scores a graph output
	// exposeProbs makes the probabilities a graph output; qperm replaces
	// Q's head-split transpose perm [0 2 1 3]
	exposeProbs bool
	qperm       []int64
	fn          bool // put the core in a model-local function
}

const (
	fB, fS, fH, fD = 2, 5, 2, 4
	fHid           = fH * fD
)

// gb builds a graph.
type gb struct {
	g   *onnxpb.GraphProto
	n   int
	rng *rand.Rand
}

func (b *gb) node(op string, in []string, attrs ...*onnxpb.AttributeProto) string {
	b.n++
	out := fmt.Sprintf("%s_%d", strings.ToLower(op), b.n)
	b.g.Node = append(b.g.Node, &onnxpb.NodeProto{Name: proto.String(out + "_node"), OpType: proto.String(op), Input: in, Output: []string{out}, Attribute: attrs})
	return out
}

func (b *gb) init(name string, t *onnx.Tensor) string {
	tp, err := onnx.EncodeTensor(name, t)
	if err != nil {
		panic(err)
	}
	b.g.Initializer = append(b.g.Initializer, tp)
	return name
}

func (b *gb) randn(name string, shape ...int) string {
	d := make([]float32, onnx.NumElements(shape))
	for i := range d {
		d[i] = float32(b.rng.NormFloat64() * 0.5)
	}
	return b.init(name, onnx.NewFloat(shape, d))
}

func (b *gb) scalar(v float32) string {
	b.n++
	return b.init(fmt.Sprintf("c%d", b.n), onnx.NewFloat([]int{}, []float32{v}))
}

func (b *gb) ints(v ...int64) string {
	b.n++
	return b.init(fmt.Sprintf("i%d", b.n), onnx.NewInt64([]int{len(v)}, v))
}

func ints0(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func ints(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func (b *gb) unsqueeze(x string, axis int64, opset int64) string {
	if opset >= 13 {
		return b.node("Unsqueeze", []string{x, b.ints(axis)})
	}
	return b.node("Unsqueeze", []string{x}, ints("axes", axis))
}

// build returns the model of form f.
func (f form) build() *onnxpb.ModelProto {
	b := &gb{g: &onnxpb.GraphProto{Name: proto.String(f.name)}, rng: rand.New(rand.NewPCG(1, 2))}
	b.g.Input = append(b.g.Input, onnx.MakeValueInfo("x", onnx.Float, []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "seq"}, {Value: fHid}}))
	if f.mask != "none" && f.mask != "trilu" && !strings.HasPrefix(f.mask, "alltrue") && !strings.HasPrefix(f.mask, "const") {
		dt := onnx.Int64
		if f.mask == "float" {
			dt = onnx.Float
		}
		b.g.Input = append(b.g.Input, onnx.MakeValueInfo("mask", dt, []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "seq"}}))
	}
	einsum := strings.HasPrefix(f.k, "einsum")
	eq := func(e string) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: proto.String("equation"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(e)}
	}
	split := func(name string) string {
		if f.k == "keras" {
			// keras MultiHeadAttention via tf2onnx: Einsum projections
			// straight to [B,S,H,D].
			return b.node("Add", []string{b.node("Einsum", []string{"x", b.randn("W"+name, fHid, fH, fD)}, eq("abc,cde->abde")), b.randn("b"+name, fH, fD)})
		}
		p := b.node("Add", []string{b.node("MatMul", []string{"x", b.randn("W"+name, fHid, fHid)}), b.randn("b"+name, fHid)})
		if name == "q" && (f.scale == "pre" || f.scale == "rotary") {
			p = b.node("Mul", []string{p, b.scalar(float32(1 / math.Sqrt(fD)))}) // q_proj(x)·scaling
		}
		return b.node("Reshape", []string{p, b.ints(0, 0, fH, fD)}) // [B,S,H,D]
	}
	einsum = einsum || f.k == "keras"
	q4, k4, v4 := split("q"), split("k"), split("v")
	invSqrtD := float32(1 / math.Sqrt(fD))
	quarter := float32(math.Pow(fD, -0.25))
	q, k := q4, k4
	if !einsum {
		qp := []int64{0, 2, 1, 3}
		if f.qperm != nil {
			qp = f.qperm
		}
		q = b.node("Transpose", []string{q4}, ints("perm", qp...))
		if f.k == "0231" {
			k = b.node("Transpose", []string{k4}, ints("perm", 0, 2, 3, 1))
		} else {
			k = b.node("Transpose", []string{b.node("Transpose", []string{k4}, ints("perm", 0, 2, 1, 3))}, ints("perm", 0, 1, 3, 2))
		}
	}
	if f.scale == "rotary" {
		// x·cos + rotate_half(x)·sin with rotate_half(x) = [−x₂, x₁].
		cs := make([]float32, fS*fD)
		sn := make([]float32, fS*fD)
		for i := 0; i < fS; i++ {
			for j := 0; j < fD; j++ {
				th := float64(i) / math.Pow(100, float64(j%(fD/2))/float64(fD/2))
				cs[i*fD+j], sn[i*fD+j] = float32(math.Cos(th)), float32(math.Sin(th))
			}
		}
		cosT, sinT := b.init("rot_cos", onnx.NewFloat([]int{fS, fD}, cs)), b.init("rot_sin", onnx.NewFloat([]int{fS, fD}, sn))
		rot := func(x string) string {
			x1 := b.node("Slice", []string{x, b.ints(0), b.ints(fD / 2), b.ints(-1)})
			x2 := b.node("Slice", []string{x, b.ints(fD / 2), b.ints(fD), b.ints(-1)})
			half := b.node("Concat", []string{b.node("Neg", []string{x2}), x1}, &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(-1)})
			return b.node("Add", []string{b.node("Mul", []string{x, cosT}), b.node("Mul", []string{half, sinT})})
		}
		q = rot(q)
		// K rotated in [B,H,S,D], then transposed to Kᵀ.
		k = b.node("Transpose", []string{rot(b.node("Transpose", []string{k4}, ints("perm", 0, 2, 1, 3)))}, ints("perm", 0, 1, 3, 2))
	}
	coreStart := len(b.g.Node)
	switch f.scale {
	case "q":
		q = b.node("Mul", []string{q, b.scalar(invSqrtD)})
	case "split":
		q = b.node("Mul", []string{q, b.scalar(quarter)})
		k = b.node("Mul", []string{b.scalar(quarter), k})
	}
	var s string
	switch f.k {
	case "einsum":
		s = b.node("Einsum", []string{q, k}, &onnxpb.AttributeProto{Name: proto.String("equation"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("bshd,bthd->bhst")})
	case "keras":
		// keras: dot_product_equation "aecd,abcd->acbe" (key, query).
		s = b.node("Einsum", []string{k, q}, eq("aecd,abcd->acbe"))
	case "einsum-swapped":
		s = b.node("Einsum", []string{k, q}, &onnxpb.AttributeProto{Name: proto.String("equation"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("bthd,bshd->bhst")})
	default:
		s = b.node("MatMul", []string{q, k})
	}
	scoresName := s
	switch f.scale {
	case "div":
		s = b.node("Div", []string{s, b.scalar(float32(math.Sqrt(fD)))})
	case "mul":
		s = b.node("Mul", []string{b.scalar(invSqrtD), s})
	case "div-input":
		b.g.Input = append(b.g.Input, onnx.MakeValueInfo("d", onnx.Float, []onnx.Dim{}))
		s = b.node("Div", []string{s, "d"})
	}
	add := func(s, m string) string {
		if f.scoresFirst {
			return b.node("Add", []string{s, m})
		}
		return b.node("Add", []string{m, s})
	}
	allTrue := func() string {
		t := make([]bool, fS)
		for i := range t {
			t[i] = true
		}
		c := b.init("all_true", &onnx.Tensor{DType: onnx.Bool, Shape: []int{1, 1, fS, 1}, Data: t})
		shape := b.node("Concat", []string{b.node("Shape", []string{"x"}, ints0("start", 0), ints0("end", 1)), b.ints(1, fS, fS)}, ints0("axis", 0))
		return b.node("Expand", []string{c, shape})
	}
	constMask := func(v float32) string {
		d := make([]float32, fS*fS)
		for i := range d {
			d[i] = v
		}
		return b.init(fmt.Sprintf("const_mask_%d", b.n), onnx.NewFloat([]int{1, 1, fS, fS}, d))
	}
	switch f.mask {
	case "const-shift":
		s = add(s, constMask(-10000)) // a legacy mask of a model exported without padding
	case "const-masked":
		s = add(s, constMask(-1e30))
	case "alltrue-add":
		s = add(s, b.node("Where", []string{allTrue(), b.scalar(0), b.scalar(-math.MaxFloat32)}))
	case "alltrue-where":
		s = b.node("Where", []string{allTrue(), s, b.scalar(-math.MaxFloat32)})
	case "expand-add":
		m := b.unsqueeze(b.unsqueeze("mask", 1, f.opset), 2, f.opset)
		m = b.node("Mul", []string{b.node("Sub", []string{b.scalar(1), b.node("Cast", []string{m}, &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Float))})}), b.scalar(-10000)})
		s = add(s, b.node("Expand", []string{m, b.node("Shape", []string{s})})) // expand_as(scores)
	case "expand-where":
		cond := b.node("Equal", []string{b.node("Reshape", []string{"mask", b.ints(0, 1, 1, -1)}), b.ints(0)})
		xs := b.node("Shape", []string{"x"})
		bsz := b.node("Slice", []string{xs, b.ints(0), b.ints(1), b.ints(0)})
		seq := b.node("Slice", []string{xs, b.ints(1), b.ints(2), b.ints(0)})
		shape := b.node("Concat", []string{bsz, b.ints(fH), seq, seq}, ints0("axis", 0))
		s = b.node("Where", []string{b.node("Expand", []string{cond, shape}), b.scalar(-math.MaxFloat32), s})
	}
	switch f.mask {
	case "add", "isnan":
		m := b.unsqueeze(b.unsqueeze("mask", 1, f.opset), 2, f.opset)
		m = b.node("Mul", []string{b.node("Sub", []string{b.scalar(1), b.node("Cast", []string{m}, &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Float))})}), b.scalar(-10000)})
		s = add(s, m)
	case "float":
		// A per-key additive bias fed as it is ([B,S] float).
		s = b.node("Add", []string{s, b.unsqueeze(b.unsqueeze("mask", 1, f.opset), 2, f.opset)})
	case "trilu":
		ones := make([]float32, fS*fS)
		for i := range ones {
			ones[i] = 1
		}
		tril := b.node("Trilu", []string{b.init("ones", onnx.NewFloat([]int{fS, fS}, ones))}, &onnxpb.AttributeProto{Name: proto.String("upper"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)})
		s = b.node("Add", []string{s, b.node("Mul", []string{b.node("Sub", []string{b.scalar(1), tril}), b.scalar(-10000)})})
	case "where":
		cond := b.node("Equal", []string{b.node("Reshape", []string{"mask", b.ints(0, 1, 1, -1)}), b.ints(0)})
		s = b.node("Where", []string{cond, b.scalar(-math.MaxFloat32), s})
	}
	switch f.scale {
	case "div-after":
		s = b.node("Div", []string{s, b.scalar(float32(math.Sqrt(fD)))})
	case "mul-after":
		s = b.node("Mul", []string{s, b.scalar(invSqrtD)})
	}
	var sm []*onnxpb.AttributeProto
	if f.axis != 0 {
		sm = append(sm, &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(f.axis)})
	}
	toFloat := &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Float))}
	if f.cast == "both" {
		s = b.node("Cast", []string{s}, toFloat)
	}
	p := b.node("Softmax", []string{s}, sm...)
	if f.cast != "" {
		p = b.node("Cast", []string{p}, toFloat)
	}
	if f.mask == "isnan" {
		p = b.node("Where", []string{b.node("IsNaN", []string{p}), b.scalar(0), p})
	}
	var o string
	if f.k == "keras" {
		o = b.node("Einsum", []string{p, v4}, eq("acbe,aecd->abcd"))
	} else if einsum {
		o = b.node("Einsum", []string{p, v4}, &onnxpb.AttributeProto{Name: proto.String("equation"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("bhst,bthd->bshd")})
	} else {
		v := b.node("Transpose", []string{v4}, ints("perm", 0, 2, 1, 3))
		o = b.node("Transpose", []string{b.node("MatMul", []string{p, v})}, ints("perm", 0, 2, 1, 3))
	}
	out := b.node("Reshape", []string{o, b.ints(0, 0, fHid)})
	b.g.Output = append(b.g.Output, onnx.MakeValueInfo(out, onnx.Float, nil))
	if f.expose {
		b.g.Output = append(b.g.Output, onnx.MakeValueInfo(scoresName, onnx.Float, nil))
	}
	if f.exposeProbs {
		b.g.Output = append(b.g.Output, onnx.MakeValueInfo(p, onnx.Float, nil))
	}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: b.g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(f.opset)}}}
	if f.fn {
		wrapFunction(m, coreStart)
	}
	return m
}

// wrapFunction moves the nodes from index start up to the node before the
// output Reshape into a model-local function, as PyTorch's
// export_modules_as_functions does for a module.
func wrapFunction(m *onnxpb.ModelProto, start int) {
	g := m.Graph
	body := g.Node[start : len(g.Node)-1]
	defined := map[string]bool{}
	for _, n := range body {
		for _, o := range n.Output {
			defined[o] = true
		}
	}
	var ins []string
	seen := map[string]bool{}
	inits := map[string]*onnxpb.TensorProto{}
	for _, t := range g.Initializer {
		inits[t.GetName()] = t
	}
	var fnodes []*onnxpb.NodeProto
	for _, n := range body {
		for _, in := range n.Input {
			if t, ok := inits[in]; ok && !seen[in] {
				// Constants become Constant nodes inside the function.
				seen[in] = true
				fnodes = append(fnodes, &onnxpb.NodeProto{OpType: proto.String("Constant"), Output: []string{in},
					Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}}})
				continue
			}
			if !defined[in] && !seen[in] {
				seen[in] = true
				ins = append(ins, in)
			}
		}
	}
	fnodes = append(fnodes, body...)
	last := body[len(body)-1].Output[0]
	f := &onnxpb.FunctionProto{Name: proto.String("SelfAttention"), Domain: proto.String("local"), Input: ins, Output: []string{last}, Node: fnodes,
		OpsetImport: m.OpsetImport}
	call := &onnxpb.NodeProto{Name: proto.String("attn_call"), OpType: proto.String("SelfAttention"), Domain: proto.String("local"), Input: ins, Output: []string{last}}
	g.Node = append(append(append([]*onnxpb.NodeProto{}, g.Node[:start]...), call), g.Node[len(g.Node)-1])
	m.Functions = append(m.Functions, f)
	m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("local"), Version: proto.Int64(1)})
}

// TestMatcherForms: each hand-built form is detected with the right heads,
// head size and scale (the product of every factor), or refused with the
// expected reason; convertible forms convert, and Linformer with k = S,
// E = F = I reproduces the original in onnxruntime to 1e-5 while Performer
// runs and, with padding, leaves the real tokens' outputs unchanged.
func TestMatcherForms(t *testing.T) {
	want := 1 / math.Sqrt(fD)
	for _, c := range []struct {
		f      form
		reason string // "" = convertible; else a substring of Reason / Unmatched
	}{
		{form{name: "div-0231-add-op11", opset: 11, k: "0231", scale: "div", mask: "add", axis: -1}, ""},
		{form{name: "mul-twostep-add-op13", opset: 13, k: "twostep", scale: "mul", mask: "add"}, ""},
		{form{name: "q-scaled-twostep-op17", opset: 17, k: "twostep", scale: "q", mask: "add"}, ""},
		{form{name: "split-sqrt-scale-op17", opset: 17, k: "twostep", scale: "split", mask: "add"}, ""},
		{form{name: "where-mask-op14", opset: 14, k: "0231", scale: "div", mask: "where"}, ""},
		{form{name: "mask-then-div-op17", opset: 17, k: "0231", scale: "div-after", mask: "add"}, ""},
		{form{name: "mask-then-mul-op13", opset: 13, k: "twostep", scale: "mul-after", mask: "add"}, ""},
		{form{name: "where-then-div-op17", opset: 17, k: "0231", scale: "div-after", mask: "where"}, ""},
		{form{name: "no-mask-op17", opset: 17, k: "0231", scale: "mul", mask: "none"}, ""},
		{form{name: "isnan-guard-op17", opset: 17, k: "twostep", scale: "div", mask: "isnan"}, ""},
		{form{name: "einsum-op13", opset: 13, k: "einsum", scale: "div", mask: "add"}, ""},
		{form{name: "einsum-swapped-qk-op13", opset: 13, k: "einsum-swapped", scale: "q", mask: "add"}, ""},
		{form{name: "keras-einsum-projections-op13", opset: 13, k: "keras", scale: "q", mask: "add"}, ""},
		{form{name: "softmax-axis3-op11", opset: 11, k: "0231", scale: "div", mask: "add", axis: 3}, ""},
		{form{name: "softmax-axis1-op11", opset: 11, k: "0231", scale: "div", mask: "add", axis: 1}, "Softmax axis 1 (opset 11)"},
		{form{name: "causal-trilu-op14", opset: 14, k: "0231", scale: "div", mask: "trilu"}, "causal"},
		{form{name: "scores-exposed", opset: 17, k: "0231", scale: "div", mask: "add", expose: true}, "is a graph output"},
		{form{name: "in-function", opset: 17, k: "0231", scale: "div", mask: "add", fn: true}, ""},
		{form{name: "cast-after-softmax-op17", opset: 17, k: "0231", scale: "mul", mask: "add", cast: "probs"}, ""},
		{form{name: "cast-around-softmax-op14", opset: 14, k: "twostep", scale: "div", mask: "where", cast: "both"}, ""},
		{form{name: "alltrue-where-add-op17", opset: 17, k: "0231", scale: "mul", mask: "alltrue-add"}, ""},
		{form{name: "alltrue-where-scores-op17", opset: 17, k: "0231", scale: "div", mask: "alltrue-where", cast: "probs"}, ""},
		{form{name: "expand-as-scores-add-op17", opset: 17, k: "0231", scale: "div", mask: "expand-add", scoresFirst: true}, ""},
		{form{name: "expand-bhss-where-op14", opset: 14, k: "twostep", scale: "mul", mask: "expand-where"}, ""},
		{form{name: "q-scaled-before-split-op17", opset: 17, k: "0231", scale: "pre", mask: "add"}, ""},
		{form{name: "q-scaled-before-rotary-op17", opset: 17, k: "rotary", scale: "rotary", mask: "add"}, ""},
	} {
		t.Run(c.f.name, func(t *testing.T) {
			m := c.f.build()
			d, err := Detect(m)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(c.reason, "Softmax axis") || strings.Contains(c.reason, "graph output") {
				if d.Count() != 0 || len(d.Unmatched) != 1 || !strings.Contains(d.Unmatched[0].Reason, c.reason) {
					t.Fatalf("want unmatched with %q, got\n%s", c.reason, d.Explain())
				}
				return
			}
			if d.Count() != 1 {
				t.Fatalf("found %d blocks\n%s", d.Count(), d.Explain())
			}
			bl := d.Blocks[0]
			if c.f.fn && bl.Function != "local.SelfAttention" {
				t.Errorf("block found in function %q, want local.SelfAttention", bl.Function)
			}
			if bl.Heads != fH || bl.HeadDim != fD || math.Abs(bl.Scale-want) > 1e-6 {
				t.Errorf("heads %d head_dim %d scale %g, want %d %d %g", bl.Heads, bl.HeadDim, bl.Scale, fH, fD, want)
			}
			if c.reason != "" {
				if c.reason == "causal" && (!bl.Causal || bl.Bias != BiasCausal) {
					t.Errorf("causal %v bias %s, want causal", bl.Causal, bl.Bias)
				}
				if bl.Convertible || !strings.Contains(bl.Reason, c.reason) {
					t.Errorf("convertible %v reason %q, want refusal with %q", bl.Convertible, bl.Reason, c.reason)
				}
				return
			}
			if !bl.Convertible {
				t.Fatalf("not convertible: %s", bl.Reason)
			}
			// The projections and the merged output the matcher proved.
			for _, p := range []struct {
				name string
				got  *Projection
			}{{"q", bl.QProj}, {"k", bl.KProj}, {"v", bl.VProj}} {
				if p.got == nil || p.got.Weight != "W"+p.name || p.got.Bias != "b"+p.name || p.got.Input != "x" {
					t.Errorf("%s projection %+v, want x·W%s + b%s", p.name, p.got, p.name, p.name)
				}
			}
			if !c.f.fn && bl.Merged != m.Graph.Output[0].GetName() {
				t.Errorf("merged output %q, want %q", bl.Merged, m.Graph.Output[0].GetName())
			}
			masked := c.f.mask != "none" && !strings.HasPrefix(c.f.mask, "alltrue") && !strings.HasPrefix(c.f.mask, "const")
			if want := map[bool]BiasKind{true: BiasPerKey, false: BiasNone}[masked]; bl.Bias != want {
				t.Errorf("bias %s, want %s", bl.Bias, want)
			}
			checkConversion(t, m, masked)
			checkCoreRemoved(t, m, d)
		})
	}
}

// checkConversion runs the original and converted models in onnxruntime.
func checkConversion(t *testing.T, m *onnxpb.ModelProto, masked bool) {
	needORT(t)
	x := make([]float32, fB*fS*fHid)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	in := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{fB, fS, fHid}, x)}
	if masked {
		ones := make([]int64, fB*fS)
		for i := range ones {
			ones[i] = 1
		}
		in["mask"] = onnx.NewInt64([]int{fB, fS}, ones)
	}
	padMask := func(t *onnx.Tensor) *onnx.Tensor {
		c := t.Clone()
		for j := fS - 2; j < fS; j++ {
			c.Int64s()[fS+j] = 0
		}
		return c
	}
	out := m.Graph.Output[0].GetName()
	want := runORT(t, m, in)[out]
	lm, _, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: fS, MaxLen: fS, Projections: identityProjections(fS)})
	if err != nil {
		t.Fatal(err)
	}
	if d := infer.CompareTensors(runORT(t, lm, in)[out], want); !d.OK(1e-5) {
		t.Errorf("linformer identity vs original: %v", d)
	}
	pm, _, err := ToPerformer(m, PerformerOptions{Features: 32, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	if !masked {
		runORT(t, pm, in)
		return
	}
	// Padding: pad the last 2 tokens of row 1 and change their inputs; the
	// outputs at the other positions must not move.
	base := map[string]*onnx.Tensor{"x": in["x"], "mask": padMask(in["mask"])}
	pin := map[string]*onnx.Tensor{"x": in["x"].Clone(), "mask": padMask(in["mask"])}
	xd := pin["x"].Floats()
	for j := fS - 2; j < fS; j++ {
		for h := 0; h < fHid; h++ {
			xd[(fS+j)*fHid+h] += 3
		}
	}
	for name, cm := range map[string]*onnxpb.ModelProto{"original": m, "performer": pm, "linformer": lm} {
		a, b := runORT(t, cm, base)[out].Floats(), runORT(t, cm, pin)[out].Floats()
		worst := 0.0
		for i := range a {
			row, pos := i/(fS*fHid), (i/fHid)%fS
			if row == 1 && pos >= fS-2 {
				continue
			}
			worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
		}
		if worst > 1e-5 {
			t.Errorf("%s: padding changed real-token outputs by %g", name, worst)
		}
	}
}

// TestModelsBERTForms: models.BERT graphs in each K-transpose and scale
// form, at several opsets, are detected and convert exactly (Linformer
// identity) in onnxruntime.
func TestModelsBERTForms(t *testing.T) {
	for _, opset := range []int{11, 13, 17} {
		for _, kt := range []models.KTranspose{models.KPerm0231, models.KTwoStep} {
			for _, sc := range []models.ScaleForm{models.ScaleDiv, models.ScaleMul, models.ScaleQ} {
				name := fmt.Sprintf("op%d-k%d-scale%d", opset, kt, sc)
				t.Run(name, func(t *testing.T) {
					cfg := models.Config{Vocab: 50, Hidden: 16, Heads: 4, Layers: 2, Intermediate: 32, MaxPositions: 16, TypeVocab: 2, Opset: opset, Seed: 9, KTranspose: kt, Scale: sc}
					m, err := models.BERT(cfg)
					if err != nil {
						t.Fatal(err)
					}
					d, err := Detect(m)
					if err != nil {
						t.Fatal(err)
					}
					if d.Count() != cfg.Layers {
						t.Fatalf("found %d blocks, want %d\n%s", d.Count(), cfg.Layers, d.Explain())
					}
					for _, b := range d.Blocks {
						if !b.Convertible || b.Heads != 4 || b.HeadDim != 4 || math.Abs(b.Scale-0.5) > 1e-6 || b.Bias != BiasPerKey {
							t.Errorf("block %d: %+v", b.Layer, b)
						}
					}
					needORT(t)
					in := modelFeeds(t, m, 6, 0, 1, true)
					want := runORT(t, m, in)
					lm, _, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: 6, MaxLen: 6, Projections: identityProjections(6)})
					if err != nil {
						t.Fatal(err)
					}
					got := runORT(t, lm, in)
					for o, w := range want {
						if d := infer.CompareTensors(got[o], w); !d.OK(1e-5) {
							t.Errorf("output %s: linformer identity vs original: %v", o, d)
						}
					}
				})
			}
		}
	}
}

// TestFusedUnidirectional: a fused Attention with unidirectional=1 is
// causal and never converted by a bidirectional op (the causal Performer
// converts it: TestCausalFusedUnidirectional).
func TestFusedUnidirectional(t *testing.T) {
	m, err := onnx.Load(filepath.Join("..", "..", "shared", "corpus", "ort-fusion", "attention_opt.onnx"))
	if err != nil {
		t.Skipf("corpus: %v", err)
	}
	for _, n := range m.Graph.Node {
		if n.GetOpType() == "Attention" {
			n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String("unidirectional"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)})
		}
	}
	d, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if d.Count() != 1 || !d.Blocks[0].Causal || d.Blocks[0].Convertible || !strings.Contains(d.Blocks[0].Reason, "unidirectional") {
		t.Fatalf("%s", d.Explain())
	}
	out, rep, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: 2, MaxLen: 8})
	if !errors.Is(err, ErrNothingConverted) || !strings.Contains(err.Error(), "unidirectional") || out != nil || rep == nil || len(rep.Converted) != 0 || len(rep.Skipped) != 1 {
		t.Fatalf("err %v model %v report %+v", err, out != nil, rep)
	}
}

// TestDetectMalformed: truncated node inputs anywhere in a real block make
// Detect and the rewrites fail or skip with an error value, never panic.
func TestDetectMalformed(t *testing.T) {
	bases := []*onnxpb.ModelProto{form{name: "base", opset: 17, k: "0231", scale: "div", mask: "add"}.build()}
	for _, f := range []string{"attention_opt.onnx", "attention_mha.onnx", "gpt2_one_layer.onnx"} {
		if m, err := onnx.Load(filepath.Join("..", "..", "shared", "corpus", "ort-fusion", f)); err == nil {
			bases = append(bases, m)
		}
	}
	for _, base := range bases {
		malformedCases(t, base)
	}
}

func malformedCases(t *testing.T, base *onnxpb.ModelProto) {
	for i := range base.Graph.Node {
		for keep := 0; keep < len(base.Graph.Node[i].Input); keep++ {
			m := proto.Clone(base).(*onnxpb.ModelProto)
			n := m.Graph.Node[i]
			n.Input = n.Input[:keep]
			if _, err := Detect(m); err != nil && (!strings.HasPrefix(err.Error(), "convert: ") || strings.Contains(err.Error(), "malformed graph")) {
				t.Errorf("node %s with %d inputs: error %q (a recovered panic, or no package prefix)", n.GetName(), keep, err)
			}
			if _, _, err := ToPerformer(m, PerformerOptions{Features: 8, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff}); err != nil && (!strings.HasPrefix(err.Error(), "convert: ") || strings.Contains(err.Error(), "malformed graph")) {
				t.Errorf("node %s with %d inputs: error %q (a recovered panic, or no package prefix)", n.GetName(), keep, err)
			}
		}
	}
}

// TestPaddingInvarianceMaskOrder: whether the mask is added before the
// score scale ((QKᵀ + mask)/√d, which turns −10000 into −1250) or after
// it, appending padded tokens to a sequence leaves the outputs at its
// real tokens unchanged (1e-5) for every op, in onnxruntime (the function
// bodies) and in the native backend (the Go kernels), as it does for the
// original model.
func TestPaddingInvarianceMaskOrder(t *testing.T) {
	needORT(t)
	const real, padded = 3, fS
	for _, f := range []form{
		{name: "mask-then-div", opset: 17, k: "0231", scale: "div-after", mask: "add"},
		{name: "mask-then-mul", opset: 13, k: "twostep", scale: "mul-after", mask: "add"},
		{name: "where-then-div", opset: 17, k: "0231", scale: "div-after", mask: "where"},
		{name: "where-then-mul", opset: 17, k: "0231", scale: "mul-after", mask: "where"},
		{name: "div-then-mask", opset: 17, k: "0231", scale: "div", mask: "add"},
		{name: "mul-then-mask", opset: 13, k: "twostep", scale: "mul", mask: "add"},
	} {
		t.Run(f.name, func(t *testing.T) {
			m := f.build()
			pm, _, err := ToPerformer(m, PerformerOptions{Features: 32, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			if err != nil {
				t.Fatal(err)
			}
			lm, _, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 16, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			lp, _, err := ToLocalPooled(m, LocalPooledOptions{Block: 1, Segments: 1, Sinks: SinkFirst})
			if err != nil {
				t.Fatal(err)
			}
			// The CLI's default Performer (centred FAVOR++) and LARA build
			// statistics over the valid tokens, so they must also read
			// the mask right whatever its order with the scale.
			cm, _, err := ToPerformer(m, PerformerOptions{Features: 32, Seed: 1, Center: CenterOn, FeatureMap: ops.FeaturesFavorPP})
			if err != nil {
				t.Fatal(err)
			}
			la, _, err := ToLARA(m, LaraOptions{Landmarks: 2, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(5, 6))
			x := make([]float32, padded*fHid)
			for i := range x {
				x[i] = float32(r.NormFloat64() * 2)
			}
			mask := make([]int64, padded)
			for j := 0; j < real; j++ {
				mask[j] = 1
			}
			long := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{1, padded, fHid}, x), "mask": onnx.NewInt64([]int{1, padded}, mask)}
			short := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{1, real, fHid}, x[:real*fHid]), "mask": onnx.NewInt64([]int{1, real}, mask[:real])}
			out := m.Graph.Output[0].GetName()
			for _, c := range []struct {
				name string
				m    *onnxpb.ModelProto
			}{{"original", m}, {"performer", pm}, {"linformer", lm}, {"local-pooled", lp}, {"performer centred favor++", cm}, {"lara", la}} {
				for _, be := range []struct {
					name string
					run  func(*testing.T, *onnxpb.ModelProto, map[string]*onnx.Tensor) map[string]*onnx.Tensor
				}{{"onnxruntime", runORT}, {"native", runNative}} {
					a, b := be.run(t, c.m, long)[out], be.run(t, c.m, short)[out]
					got := onnx.NewFloat([]int{1, real, fHid}, a.Floats()[:real*fHid])
					if d := infer.CompareTensors(got, b); !d.OK(1e-5) {
						t.Errorf("%s (%s): padded vs unpadded outputs at the real tokens: %v", c.name, be.name, d)
					}
				}
			}
		})
	}
}

// TestPerformerScaledBias: a per-key bias added before the scale,
// (QKᵀ + b)/√d, reaches Performer as b/√d exactly: the converted model
// matches (1e-5) the conversion of the same block written QKᵀ/√d + b/√d
// and fed b/√d, with ω from the same seed.
func TestPerformerScaledBias(t *testing.T) {
	needORT(t)
	before := form{name: "bias-then-div", opset: 17, k: "0231", scale: "div-after", mask: "float"}.build()
	after := form{name: "div-then-bias", opset: 17, k: "0231", scale: "div", mask: "float"}.build()
	r := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, fB*fS*fHid)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	b := make([]float32, fB*fS)
	bs := make([]float32, fB*fS)
	for i := range b {
		b[i] = float32(r.NormFloat64() * 3)
		bs[i] = b[i] / float32(math.Sqrt(fD))
	}
	xs := onnx.NewFloat([]int{fB, fS, fHid}, x)
	out := before.Graph.Output[0].GetName()
	var got [2]*onnx.Tensor
	for i, c := range []struct {
		m    *onnxpb.ModelProto
		bias []float32
	}{{before, b}, {after, bs}} {
		d, err := Detect(c.m)
		if err != nil || d.Count() != 1 || !d.Blocks[0].Convertible || d.Blocks[0].Bias != BiasPerKey {
			t.Fatalf("detect: %v\n%s", err, d.Explain())
		}
		pm, _, err := ToPerformer(c.m, PerformerOptions{Features: 64, Seed: 3, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
		if err != nil {
			t.Fatal(err)
		}
		got[i] = runORT(t, pm, map[string]*onnx.Tensor{"x": xs, "mask": onnx.NewFloat([]int{fB, fS}, c.bias)})[out]
	}
	if d := infer.CompareTensors(got[0], got[1]); !d.OK(1e-5) {
		t.Errorf("performer, bias before vs after the scale: %v", d)
	}
}

// checkCoreRemoved: after a conversion no node of a converted core is
// left in the graph (nothing keeps the S×S scores alive, not even for
// their shape).
func checkCoreRemoved(t *testing.T, m *onnxpb.ModelProto, d *Detection) {
	t.Helper()
	pm, _, err := ToPerformer(m, PerformerOptions{Features: 8, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, n := range pm.Graph.Node {
		left[nodeName(n)] = true
	}
	for _, b := range d.Blocks {
		if !b.Convertible {
			continue
		}
		for _, n := range b.Nodes {
			if left[n] {
				t.Errorf("block %d: core node %s is still in the converted graph", b.Layer, n)
			}
		}
	}
}

// TestExplainFurthest: for a Softmax that is no attention core, Detect
// reports the reading of the scores that got furthest, not the last one
// tried: here the scores side fails at a Div by a non-constant (a node
// with a role in the pattern), while the other readings (the mask taken
// as the scores, or the Where's other branch) fail earlier.
func TestExplainFurthest(t *testing.T) {
	for _, c := range []struct {
		f    form
		want string
	}{
		{form{name: "where-mask", opset: 17, k: "0231", scale: "div-input", mask: "where"}, "divides the scores by a non-constant"},
		{form{name: "add-scores-first", opset: 17, k: "0231", scale: "div-input", mask: "add", scoresFirst: true}, "divides the scores by a non-constant"},
		{form{name: "add-mask-first", opset: 17, k: "0231", scale: "div-input", mask: "add"}, "divides the scores by a non-constant"},
		{form{name: "bad-layout", opset: 17, k: "0231", scale: "div", mask: "add", axis: -1, qperm: []int64{0, 2, 3, 1}}, "Q is transposed by perm [0 2 3 1]"},
		{form{name: "probs-exposed", opset: 17, k: "0231", scale: "div", mask: "add", exposeProbs: true}, "are a graph output"},
		{form{name: "every-key-masked", opset: 17, k: "0231", scale: "div", mask: "const-masked"}, "every key is masked"},
	} {
		t.Run(c.f.name, func(t *testing.T) { checkExplainFurthest(t, c.f.build(), c.want) })
	}
}

// checkExplainFurthest checks that Detect matches nothing in m and gives
// want as the reason of its one unmatched Softmax, in Explain too.
func checkExplainFurthest(t *testing.T, m *onnxpb.ModelProto, want string) {
	t.Helper()
	d, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if d.Count() != 0 || len(d.Unmatched) != 1 || !strings.Contains(d.Unmatched[0].Reason, want) {
		t.Fatalf("want one unmatched Softmax with %q, got\n%s", want, d.Explain())
	}
	if !strings.Contains(d.Explain(), want) {
		t.Errorf("Explain does not give the reason:\n%s", d.Explain())
	}
}

// TestConstantShift: −10000 added to every score (a legacy mask exported
// for inputs without padding) is a shift the softmax ignores: no bias, and
// the conversion computes the unshifted attention, which the original
// only approximates (float32 rounds scores − 10000 in steps of ~1e-3).
func TestConstantShift(t *testing.T) {
	shifted := form{name: "shift", opset: 17, k: "0231", scale: "div", mask: "const-shift"}.build()
	plain := form{name: "plain", opset: 17, k: "0231", scale: "div", mask: "none"}.build()
	d, err := Detect(shifted)
	if err != nil {
		t.Fatal(err)
	}
	if d.Count() != 1 || !d.Blocks[0].Convertible || d.Blocks[0].Bias != BiasNone || !strings.Contains(d.Blocks[0].Form, "add-const") {
		t.Fatalf("want one convertible block with no bias\n%s", d.Explain())
	}
	needORT(t)
	r := rand.New(rand.NewPCG(9, 9))
	x := make([]float32, fB*fS*fHid)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	in := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{fB, fS, fHid}, x)}
	want := runORT(t, plain, in)[plain.Graph.Output[0].GetName()]
	out := shifted.Graph.Output[0].GetName()
	lm, _, err := ToLinformer(shifted, LinformerOptions{Init: "gaussian", K: fS, MaxLen: fS, Projections: identityProjections(fS)})
	if err != nil {
		t.Fatal(err)
	}
	if d := infer.CompareTensors(runORT(t, lm, in)[out], want); !d.OK(1e-5) {
		t.Errorf("linformer identity of the shifted model vs the unshifted original: %v", d)
	}
	if d := infer.CompareTensors(runORT(t, shifted, in)[out], want); !d.OK(1e-2) {
		t.Errorf("the shifted original is not the unshifted one up to rounding: %v", d)
	}
}
