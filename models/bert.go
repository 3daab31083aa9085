package models

import (
	"cmp"
	"fmt"
	"math"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// KTranspose selects how the graph turns K into Kᵀ for the score MatMul.
type KTranspose int

const (
	// KPerm0231 reshapes K to [B,S,H,D] and transposes it with perm
	// [0,2,3,1] straight to [B,H,D,S] (what older exporters wrote).
	KPerm0231 KTranspose = iota
	// KTwoStep transposes K with [0,2,1,3] like Q and V, then with
	// [0,1,3,2] (what the PyTorch exporter writes for key.transpose(-1,-2)
	// after the head split).
	KTwoStep
)

// ScaleForm selects where the 1/√D score scale sits.
type ScaleForm int

const (
	// ScaleDiv divides the scores by √D after the QK MatMul.
	ScaleDiv ScaleForm = iota
	// ScaleMul multiplies the scores by 1/√D after the QK MatMul.
	ScaleMul
	// ScaleQ multiplies Q by 1/√D before the QK MatMul.
	ScaleQ
)

// Config describes a BERT encoder.
type Config struct {
	Vocab        int // word-embedding rows
	Hidden       int // model width; a multiple of Heads
	Heads        int // attention heads
	Layers       int // encoder layers
	Intermediate int // FFN width
	MaxPositions int // rows of the absolute position table
	TypeVocab    int // token-type rows (2 for BERT)
	Opset        int // default-domain opset, 11 to 21

	Seed    uint64  // seeds the random weights
	InitStd float64 // std of random weights; 0 means 0.02
	LNEps   float32 // LayerNorm epsilon; 0 means 1e-12

	KTranspose KTranspose
	Scale      ScaleForm

	// Causal adds a triangular mask to every layer's scores, as a BERT
	// used as a decoder (is_decoder=True) is exported: query i sees keys
	// j ≤ i. The mask is built at run time from Range and Less over the
	// sequence positions and added to the padding mask, giving one
	// [batch, 1, seq, seq] bias. Needs opset ≥ 12 (LessOrEqual).
	Causal bool

	// Weights, when non-nil, supplies parameters by their Hugging Face
	// BertModel state-dict names (e.g. "embeddings.word_embeddings.weight",
	// "encoder.layer.0.attention.self.query.weight" in PyTorch's Linear
	// layout [out, in], "pooler.dense.bias"). Missing entries are drawn at
	// random; entries BERT does not use are an error.
	Weights map[string]*onnx.Tensor
}

// TinyConfig is the bundled test model: hidden 64, 4 heads, 2 layers,
// FFN 256, vocabulary 1000, 128 positions, opset 17.
func TinyConfig() Config {
	return Config{Vocab: 1000, Hidden: 64, Heads: 4, Layers: 2, Intermediate: 256,
		MaxPositions: 128, TypeVocab: 2, Opset: 17, Seed: 1}
}

// BaseConfig is BERT-base width (hidden 768, 12 heads, FFN 3072, vocabulary
// 30522) with the given depth and position-table length, opset 17.
func BaseConfig(layers, maxPositions int) Config {
	return Config{Vocab: 30522, Hidden: 768, Heads: 12, Layers: layers, Intermediate: 3072,
		MaxPositions: maxPositions, TypeVocab: 2, Opset: 17, Seed: 1}
}

// HeadDim is Hidden / Heads.
func (c Config) HeadDim() int { return c.Hidden / c.Heads }

// Validate reports the first invalid field.
func (c Config) Validate() error {
	pos := []struct {
		name string
		v    int
	}{{"vocab", c.Vocab}, {"hidden", c.Hidden}, {"heads", c.Heads}, {"layers", c.Layers},
		{"intermediate", c.Intermediate}, {"max positions", c.MaxPositions}, {"type vocab", c.TypeVocab}}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("models: %s must be positive, got %d", p.name, p.v)
		}
	}
	if c.Hidden%c.Heads != 0 {
		return fmt.Errorf("models: hidden %d is not a multiple of heads %d", c.Hidden, c.Heads)
	}
	if c.Opset < 11 || c.Opset > 21 {
		return fmt.Errorf("models: opset %d not supported (11 to 21)", c.Opset)
	}
	if c.Causal && c.Opset < 12 {
		return fmt.Errorf("models: a causal model needs opset 12 or later (LessOrEqual), got %d", c.Opset)
	}
	if c.InitStd < 0 || math.IsNaN(c.InitStd) || math.IsInf(c.InitStd, 0) {
		return fmt.Errorf("models: init std %v must be finite and ≥ 0", c.InitStd)
	}
	if c.KTranspose != KPerm0231 && c.KTranspose != KTwoStep {
		return fmt.Errorf("models: unknown K transpose form %d", c.KTranspose)
	}
	if c.Scale != ScaleDiv && c.Scale != ScaleMul && c.Scale != ScaleQ {
		return fmt.Errorf("models: unknown scale form %d", c.Scale)
	}
	if int64(c.Vocab)*int64(c.Hidden) > 1<<31 || int64(c.MaxPositions)*int64(c.Hidden) > 1<<31 {
		return fmt.Errorf("models: embedding table too large (vocab %d / positions %d × hidden %d)", c.Vocab, c.MaxPositions, c.Hidden)
	}
	return nil
}

// BERT builds the graph of a Hugging Face BertModel as the PyTorch exporter
// writes it. Inputs are input_ids, attention_mask and token_type_ids, int64
// [batch, sequence]; outputs last_hidden_state [batch, sequence, hidden]
// and pooler_output [batch, hidden].
func BERT(cfg Config) (*onnxpb.ModelProto, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	std := cmp.Or(cfg.InitStd, 0.02)
	eps := cmp.Or(cfg.LNEps, 1e-12)
	w := newWeights(cfg.Seed, 0x6c696e656172697a, std, cfg.Weights)
	g := newGraph(cfg.Opset)
	H, D, hidden := cfg.Heads, cfg.HeadDim(), cfg.Hidden

	// Parameters a Linear layer owns: the exporter stores the weight
	// transposed under an onnx::MatMul_N name and the bias under its
	// state-dict name.
	linear := func(prefix string, in, out int) (wname, bname string) {
		wt := w.get(prefix+".weight", []int{out, in}, "normal")
		bt := w.get(prefix+".bias", []int{out}, "bias")
		g.matmuls++
		wname = g.init("onnx::MatMul_"+itoa(g.matmuls), transpose2(wt))
		bname = g.init(prefix+".bias", bt)
		return
	}
	ln := func(prefix string) (string, string) {
		gt := w.get(prefix+".weight", []int{hidden}, "ones")
		bt := w.get(prefix+".bias", []int{hidden}, "bias")
		return g.init(prefix+".weight", gt), g.init(prefix+".bias", bt)
	}
	dense := func(path, x, wname, bname string) string {
		mm := g.node("MatMul", path+"/MatMul", []string{x, wname})
		return g.node("Add", path+"/Add", []string{bname, mm})
	}

	// Embeddings.
	wordEmb := g.init("embeddings.word_embeddings.weight", w.get("embeddings.word_embeddings.weight", []int{cfg.Vocab, hidden}, "normal"))
	posEmb := g.init("embeddings.position_embeddings.weight", w.get("embeddings.position_embeddings.weight", []int{cfg.MaxPositions, hidden}, "normal"))
	ttEmb := g.init("embeddings.token_type_embeddings.weight", w.get("embeddings.token_type_embeddings.weight", []int{cfg.TypeVocab, hidden}, "normal"))
	embLNw, embLNb := ln("embeddings.LayerNorm")
	pids := make([]int64, cfg.MaxPositions)
	for i := range pids {
		pids[i] = int64(i)
	}
	posIDs := g.init("embeddings.position_ids", onnx.NewInt64([]int{1, cfg.MaxPositions}, pids))

	// seq_length = input_ids.size(1); position_ids[:, 0:seq_length].
	shp := g.node("Shape", "/embeddings/Shape", []string{"input_ids"})
	one := g.constScalarInt("/embeddings/Constant", 1)
	seqLen := g.node("Gather", "/embeddings/Gather", []string{shp, one}, attrInt("axis", 0))
	start := g.constInts("/embeddings/Constant_1", 0)
	end := g.unsqueeze("/embeddings/Unsqueeze", seqLen, 0)
	axes := g.constInts("/embeddings/Constant_2", 1)
	step := g.constInts("/embeddings/Constant_3", 1)
	posSlice := g.node("Slice", "/embeddings/Slice", []string{posIDs, start, end, axes, step})

	words := g.node("Gather", "/embeddings/word_embeddings/Gather", []string{wordEmb, "input_ids"})
	types := g.node("Gather", "/embeddings/token_type_embeddings/Gather", []string{ttEmb, "token_type_ids"})
	emb := g.node("Add", "/embeddings/Add", []string{words, types})
	pos := g.node("Gather", "/embeddings/position_embeddings/Gather", []string{posEmb, posSlice})
	emb = g.node("Add", "/embeddings/Add_1", []string{emb, pos})
	h := g.layerNorm("/embeddings/LayerNorm", emb, embLNw, embLNb, eps)

	// Extended mask: (1 − mask[:, None, None, :]) · min_float32.
	m1 := g.unsqueeze("/Unsqueeze", "attention_mask", 1)
	m2 := g.unsqueeze("/Unsqueeze_1", m1, 2)
	toFloat := int64(onnx.Float)
	mf := g.node("Cast", "/Cast", []string{m2}, attrInt("to", toFloat))
	if cfg.Causal {
		// As transformers does for is_decoder: allowed[i, j] = j ≤ i,
		// times the padding mask, before the one (1 − m)·min_float32 (so
		// that two minima never add up to −inf).
		zero := g.constScalarInt("/causal/Constant", 0)
		pos := g.node("Range", "/causal/Range", []string{zero, seqLen, one})
		rows := g.unsqueeze("/causal/Unsqueeze", pos, 1)
		cols := g.unsqueeze("/causal/Unsqueeze_1", pos, 0)
		allowed := g.node("LessOrEqual", "/causal/LessOrEqual", []string{cols, rows})
		allowedF := g.node("Cast", "/causal/Cast", []string{allowed}, attrInt("to", toFloat))
		mf = g.node("Mul", "/causal/Mul", []string{mf, allowedF})
	}
	oneF := g.constScalarFloat("/Constant", 1)
	inv := g.node("Sub", "/Sub", []string{oneF, mf})
	minF := g.constScalarFloat("/Constant_1", float32Min)
	mask := g.node("Mul", "/Mul", []string{inv, minF})

	invSqrtD := float32(1 / math.Sqrt(float64(D)))
	sqrtD := float32(math.Sqrt(float64(D)))

	for l := 0; l < cfg.Layers; l++ {
		sp := fmt.Sprintf("encoder.layer.%d.", l)
		pp := fmt.Sprintf("/encoder/layer.%d/", l)
		qw, qb := linear(sp+"attention.self.query", hidden, hidden)
		kw, kb := linear(sp+"attention.self.key", hidden, hidden)
		vw, vb := linear(sp+"attention.self.value", hidden, hidden)
		ow, ob := linear(sp+"attention.output.dense", hidden, hidden)
		alnw, alnb := ln(sp + "attention.output.LayerNorm")
		iw, ib := linear(sp+"intermediate.dense", hidden, cfg.Intermediate)
		fw, fb := linear(sp+"output.dense", cfg.Intermediate, hidden)
		olnw, olnb := ln(sp + "output.LayerNorm")

		ap := pp + "attention/self/"
		q := dense(ap+"query", h, qw, qb)
		k := dense(ap+"key", h, kw, kb)
		v := dense(ap+"value", h, vw, vb)

		// x.view(B, S, H, D) through the exporter's shape chain.
		split := func(name, x string) string { return g.viewBS(ap+name, x, int64(H), int64(D)) }
		qh := g.node("Transpose", ap+"Transpose_q", []string{split("q", q)}, attrInts("perm", 0, 2, 1, 3))
		kr := split("k", k)
		var kt string
		if cfg.KTranspose == KPerm0231 {
			kt = g.node("Transpose", ap+"Transpose_k", []string{kr}, attrInts("perm", 0, 2, 3, 1))
		} else {
			kh := g.node("Transpose", ap+"Transpose_k", []string{kr}, attrInts("perm", 0, 2, 1, 3))
			kt = g.node("Transpose", ap+"Transpose_kt", []string{kh}, attrInts("perm", 0, 1, 3, 2))
		}
		vh := g.node("Transpose", ap+"Transpose_v", []string{split("v", v)}, attrInts("perm", 0, 2, 1, 3))

		var scores string
		switch cfg.Scale {
		case ScaleDiv:
			raw := g.node("MatMul", ap+"MatMul", []string{qh, kt})
			c := g.constScalarFloat(ap+"Constant_scale", sqrtD)
			scores = g.node("Div", ap+"Div", []string{raw, c})
		case ScaleMul:
			raw := g.node("MatMul", ap+"MatMul", []string{qh, kt})
			c := g.constScalarFloat(ap+"Constant_scale", invSqrtD)
			scores = g.node("Mul", ap+"Mul", []string{raw, c})
		case ScaleQ:
			c := g.constScalarFloat(ap+"Constant_scale", invSqrtD)
			qs := g.node("Mul", ap+"Mul", []string{qh, c})
			scores = g.node("MatMul", ap+"MatMul", []string{qs, kt})
		}
		scores = g.node("Add", ap+"Add", []string{scores, mask})
		probs := g.node("Softmax", ap+"Softmax", []string{scores}, attrInt("axis", -1))
		ctx := g.node("MatMul", ap+"MatMul_1", []string{probs, vh})
		ctx = g.node("Transpose", ap+"Transpose_1", []string{ctx}, attrInts("perm", 0, 2, 1, 3))
		// context.view(B, S, hidden).
		ctx = g.viewBS(ap+"merge", ctx, int64(hidden))

		op := pp + "attention/output/"
		a := dense(op+"dense", ctx, ow, ob)
		a = g.node("Add", op+"Add", []string{a, h})
		h1 := g.layerNorm(op+"LayerNorm", a, alnw, alnb, eps)

		ip := pp + "intermediate/"
		f := dense(ip+"dense", h1, iw, ib)
		// Exact Gelu: x · 0.5 · (1 + erf(x / √2)).
		sq2 := g.constScalarFloat(ip+"intermediate_act_fn/Constant", float32(math.Sqrt2))
		e := g.node("Div", ip+"intermediate_act_fn/Div", []string{f, sq2})
		e = g.node("Erf", ip+"intermediate_act_fn/Erf", []string{e})
		onec := g.constScalarFloat(ip+"intermediate_act_fn/Constant_1", 1)
		e = g.node("Add", ip+"intermediate_act_fn/Add", []string{e, onec})
		e = g.node("Mul", ip+"intermediate_act_fn/Mul", []string{f, e})
		half := g.constScalarFloat(ip+"intermediate_act_fn/Constant_2", 0.5)
		f = g.node("Mul", ip+"intermediate_act_fn/Mul_1", []string{e, half})

		fp := pp + "output/"
		o := dense(fp+"dense", f, fw, fb)
		o = g.node("Add", fp+"Add", []string{o, h1})
		h = g.layerNorm(fp+"LayerNorm", o, olnw, olnb, eps)
	}

	// Output names: the hidden state is renamed by an Identity so that the
	// graph output carries the Hugging Face name.
	g.nodeOut("Identity", "/Identity_last_hidden_state", []string{h}, []string{"last_hidden_state"})
	pw, pb := linear("pooler.dense", hidden, hidden)
	zero := g.constScalarInt("/pooler/Constant", 0)
	first := g.node("Gather", "/pooler/Gather", []string{h, zero}, attrInt("axis", 1))
	pd := dense("/pooler/dense", first, pw, pb)
	g.nodeOut("Tanh", "/pooler/activation/Tanh", []string{pd}, []string{"pooler_output"})

	if err := w.done(g, "BERT"); err != nil {
		return nil, err
	}

	doc := fmt.Sprintf("BERT: hidden %d, heads %d, layers %d, intermediate %d, vocab %d, positions %d, seed %d",
		hidden, H, cfg.Layers, cfg.Intermediate, cfg.Vocab, cfg.MaxPositions, cfg.Seed)
	outputs := []*onnxpb.ValueInfoProto{
		onnx.MakeValueInfo("last_hidden_state", onnx.Float, append(batchSeq(), onnx.Dim{Value: int64(hidden)})),
		onnx.MakeValueInfo("pooler_output", onnx.Float, []onnx.Dim{batchSeq()[0], {Value: int64(hidden)}}),
	}
	return g.model(g.nodes, []string{"input_ids", "attention_mask", "token_type_ids"}, outputs, doc, len(cfg.Weights)), nil
}
