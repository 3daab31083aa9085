package models

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"math"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// ModernBERTConfig describes a ModernBERT encoder (Hugging Face
// ModernBertModel): rotary positions, a packed Wqkv projection, GeGLU
// MLPs, bias-free pre-norm LayerNorms, and layers that alternate between
// global attention and a sliding window.
type ModernBERTConfig struct {
	Vocab        int // token-embedding rows (vocab_size)
	Hidden       int // model width (hidden_size); a multiple of Heads
	Heads        int // attention heads; Hidden/Heads must be even (RoPE)
	Layers       int // encoder layers (num_hidden_layers)
	Intermediate int // MLP width (intermediate_size): Wi projects to 2·Intermediate, input and gate
	// GlobalEvery is global_attn_every_n_layers: layer i attends globally
	// when i % GlobalEvery == 0, within the sliding window otherwise
	// (1: every layer global).
	GlobalEvery int
	// Window is local_attention, the full window: a local layer's query i
	// sees the keys j with |i − j| ≤ Window/2. Even, at least 2.
	Window int
	// MaxPositions is max_position_embeddings. RoPE has no position table,
	// so nothing in the graph depends on it; the model's doc string
	// records it.
	MaxPositions int
	Opset        int // default-domain opset, 12 to 21

	GlobalRopeTheta float64 // RoPE base of global layers; 0 means 160000
	LocalRopeTheta  float64 // RoPE base of local layers; 0 means 10000
	NormEps         float32 // LayerNorm epsilon (norm_eps); 0 means 1e-5

	Seed    uint64  // seeds the random weights
	InitStd float64 // initializer_range; 0 means 0.02

	// Weights, when non-nil, supplies parameters by their Hugging Face
	// ModernBertModel state-dict names ("embeddings.tok_embeddings.weight",
	// "embeddings.norm.weight", "layers.1.attn_norm.weight",
	// "layers.0.attn.Wqkv.weight" in PyTorch's Linear layout [out, in],
	// "layers.0.attn.Wo.weight", "layers.0.mlp_norm.weight",
	// "layers.0.mlp.Wi.weight", "layers.0.mlp.Wo.weight",
	// "final_norm.weight"). Layer 0 has no attn_norm (it is an Identity
	// in ModernBERT). Missing entries are drawn at random; entries the
	// model does not use are an error.
	Weights map[string]*onnx.Tensor
}

// ModernBERTTinyConfig is a small ModernBERT for tests: hidden 64, 4 heads,
// 3 layers (global, local, local), MLP 96, window 16 (±8), vocabulary
// 1000, 512 positions, opset 17.
func ModernBERTTinyConfig() ModernBERTConfig {
	return ModernBERTConfig{Vocab: 1000, Hidden: 64, Heads: 4, Layers: 3, Intermediate: 96,
		GlobalEvery: 3, Window: 16, MaxPositions: 512, Opset: 17, Seed: 1}
}

// ModernBERTBaseConfig is ModernBERT-base width (hidden 768, 12 heads, MLP
// 1152, vocabulary 50368, every third layer global, window 128) with the
// given depth and max_position_embeddings (8192 in the released model),
// opset 17.
func ModernBERTBaseConfig(layers, maxPositions int) ModernBERTConfig {
	return ModernBERTConfig{Vocab: 50368, Hidden: 768, Heads: 12, Layers: layers, Intermediate: 1152,
		GlobalEvery: 3, Window: 128, MaxPositions: maxPositions, Opset: 17, Seed: 1}
}

// HeadDim is Hidden / Heads.
func (c ModernBERTConfig) HeadDim() int { return c.Hidden / c.Heads }

// Global reports whether layer i attends globally (i % GlobalEvery == 0).
func (c ModernBERTConfig) Global(i int) bool { return c.GlobalEvery > 0 && i%c.GlobalEvery == 0 }

func (c ModernBERTConfig) globalTheta() float64 {
	if c.GlobalRopeTheta == 0 {
		return 160000
	}
	return c.GlobalRopeTheta
}

func (c ModernBERTConfig) localTheta() float64 {
	if c.LocalRopeTheta == 0 {
		return 10000
	}
	return c.LocalRopeTheta
}

// Validate reports the first invalid field.
func (c ModernBERTConfig) Validate() error {
	pos := []struct {
		name string
		v    int
	}{{"vocab", c.Vocab}, {"hidden", c.Hidden}, {"heads", c.Heads}, {"layers", c.Layers},
		{"intermediate", c.Intermediate}, {"global every", c.GlobalEvery}, {"window", c.Window},
		{"max positions", c.MaxPositions}}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("models: modernbert: %s must be positive, got %d", p.name, p.v)
		}
	}
	if c.Hidden%c.Heads != 0 {
		return fmt.Errorf("models: modernbert: hidden %d is not a multiple of heads %d", c.Hidden, c.Heads)
	}
	if d := c.HeadDim(); d%2 != 0 {
		return fmt.Errorf("models: modernbert: head dim %d (hidden %d / heads %d) must be even for rotary embeddings", d, c.Hidden, c.Heads)
	}
	if c.Window < 2 || c.Window%2 != 0 {
		return fmt.Errorf("models: modernbert: window %d must be even and at least 2 (a local query sees window/2 keys on each side)", c.Window)
	}
	if c.Opset < 12 || c.Opset > 21 {
		return fmt.Errorf("models: modernbert: opset %d not supported (12 to 21; the band mask needs LessOrEqual)", c.Opset)
	}
	for _, th := range []struct {
		name string
		v    float64
	}{{"global rope theta", c.GlobalRopeTheta}, {"local rope theta", c.LocalRopeTheta}} {
		if th.v != 0 && !(th.v > 1 && !math.IsInf(th.v, 0)) {
			return fmt.Errorf("models: modernbert: %s %v must be finite and > 1 (or 0 for the default)", th.name, th.v)
		}
	}
	if c.NormEps < 0 || math.IsNaN(float64(c.NormEps)) || math.IsInf(float64(c.NormEps), 0) {
		return fmt.Errorf("models: modernbert: norm eps %v must be finite and ≥ 0", c.NormEps)
	}
	if c.InitStd < 0 || math.IsNaN(c.InitStd) || math.IsInf(c.InitStd, 0) {
		return fmt.Errorf("models: modernbert: init std %v must be finite and ≥ 0", c.InitStd)
	}
	if int64(c.Vocab)*int64(c.Hidden) > 1<<31 {
		return fmt.Errorf("models: modernbert: embedding table too large (vocab %d × hidden %d)", c.Vocab, c.Hidden)
	}
	if int64(c.Hidden)*int64(2*c.Intermediate) > 1<<31 || int64(c.Hidden)*int64(3*c.Hidden) > 1<<31 {
		return fmt.Errorf("models: modernbert: projection too large (hidden %d, intermediate %d)", c.Hidden, c.Intermediate)
	}
	return nil
}

// ropeInvFreq is the rotary inverse frequencies of a head of width d,
// 1/θ^(2f/d) for f < d/2, computed in float32 as transformers does.
func ropeInvFreq(theta float64, d int) []float32 {
	inv := make([]float32, d/2)
	for f := range inv {
		e := float32(2*f) / float32(d)
		inv[f] = float32(1 / math.Pow(theta, float64(e)))
	}
	return inv
}

// scope names nodes like the TorchScript exporter: "<prefix>Op" for the
// first node of a type in a module, then "<prefix>Op_1", "<prefix>Op_2"...
type scope struct {
	g      *graph
	prefix string
	n      map[string]int
}

func newScope(g *graph, prefix string) *scope {
	return &scope{g: g, prefix: prefix, n: map[string]int{}}
}

func (s *scope) name(op string) string {
	k := s.n[op]
	s.n[op]++
	if k == 0 {
		return s.prefix + op
	}
	return fmt.Sprintf("%s%s_%d", s.prefix, op, k)
}

func (s *scope) op(op string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	return s.g.node(op, s.name(op), inputs, attrs...)
}

// opOut is op with a given output name.
func (s *scope) opOut(op, out string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	s.g.nodeOut(op, s.name(op), inputs, []string{out}, attrs...)
	return out
}

func (s *scope) constant(t *onnx.Tensor) string { return s.g.constant(s.name("Constant"), t) }

// ints is a 1-D int64 Constant.
func (s *scope) ints(v ...int64) string { return s.constant(onnx.NewInt64([]int{len(v)}, v)) }

// scalar is a rank-0 int64 Constant.
func (s *scope) scalar(v int64) string { return s.constant(onnx.NewInt64([]int{}, []int64{v})) }

// scalarF is a rank-0 float32 Constant.
func (s *scope) scalarF(v float32) string { return s.constant(onnx.NewFloat([]int{}, []float32{v})) }

func (s *scope) cast(x string, to onnx.DataType) string {
	return s.op("Cast", []string{x}, attrInt("to", int64(to)))
}

// unsqueeze and squeeze take their axes as an input from opset 13, as an
// attribute before.
func (s *scope) unsqueeze(x string, axis int64) string {
	if s.g.opset >= 13 {
		a := s.ints(axis)
		return s.op("Unsqueeze", []string{x, a})
	}
	return s.op("Unsqueeze", []string{x}, attrInts("axes", axis))
}

func (s *scope) squeeze(x string, axis int64) string {
	if s.g.opset >= 13 {
		a := s.ints(axis)
		return s.op("Squeeze", []string{x, a})
	}
	return s.op("Squeeze", []string{x}, attrInts("axes", axis))
}

// dim is Gather(Shape(x), i) with a scalar index: a rank-0 int64.
func (s *scope) dim(x string, i int64) string {
	shp := s.op("Shape", []string{x})
	return s.op("Gather", []string{shp, s.scalar(i)}, attrInt("axis", 0))
}

// rangeTo is Range(0, n, 1) over a scalar n cast to int64, as torch.arange
// exports.
func (s *scope) rangeTo(n string) string {
	limit := s.cast(n, onnx.Int64)
	return s.op("Range", []string{s.scalar(0), limit, s.scalar(1)})
}

// layerNorm is a LayerNorm with a weight and no bias (ModernBERT's
// norm_bias=False): LayerNormalization with a zero Constant bias from
// opset 17 (as the exporter writes bias=None), else the
// ReduceMean/Sub/Pow/Add/Sqrt/Div decomposition and a Mul. out, when not
// empty, names the result.
func (s *scope) layerNorm(x, w string, hidden int, eps float32, out string) string {
	if s.g.opset >= 17 {
		zero := s.constant(onnx.NewFloat([]int{hidden}, make([]float32, hidden)))
		in := []string{x, w, zero}
		attrs := []*onnxpb.AttributeProto{attrInt("axis", -1), attrFloat("epsilon", eps)}
		if out != "" {
			return s.opOut("LayerNormalization", out, in, attrs...)
		}
		return s.op("LayerNormalization", in, attrs...)
	}
	mean := s.g.reduceMeanLast(s.name("ReduceMean"), x)
	d := s.op("Sub", []string{x, mean})
	sq := s.op("Pow", []string{d, s.scalarF(2)})
	v := s.g.reduceMeanLast(s.name("ReduceMean"), sq)
	ve := s.op("Add", []string{v, s.scalarF(eps)})
	sd := s.op("Sqrt", []string{ve})
	n := s.op("Div", []string{d, sd})
	if out != "" {
		return s.opOut("Mul", out, []string{n, w})
	}
	return s.op("Mul", []string{n, w})
}

// ModernBERT builds the graph of a Hugging Face ModernBertModel with eager
// attention as the PyTorch (TorchScript) exporter writes it from
// transformers' current masking code; see the package documentation for
// the node forms. Inputs are input_ids and attention_mask, int64 [batch,
// sequence]; the output is last_hidden_state float32 [batch, sequence,
// hidden]. The same config gives the same model bytes.
func ModernBERT(cfg ModernBERTConfig) (*onnxpb.ModelProto, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	std := cmp.Or(cfg.InitStd, 0.02)
	eps := cmp.Or(cfg.NormEps, 1e-5)
	w := newWeights(cfg.Seed, 0x6d6f6465726e6274, std, cfg.Weights)
	// draw draws N(0, s²) (or 1 exactly for "ones", the norms' weights as
	// transformers initialises them) unless the weight is supplied.
	draw := func(name string, shape []int, s float64, kind string) *onnx.Tensor {
		w.std = s
		return w.get(name, shape, kind)
	}
	g := newGraph(cfg.Opset)
	H, D, hidden, inter := cfg.Heads, cfg.HeadDim(), cfg.Hidden, cfg.Intermediate
	// transformers' ModernBERT init: "in" projections and the embedding at
	// initializer_range, the two "out" projections (attn.Wo, mlp.Wo) at
	// initializer_range/√(2·layers).
	outStd := std / math.Sqrt(2*float64(cfg.Layers))

	// The exporter stores a Linear's weight transposed under an
	// onnx::MatMul_N name; it keeps one copy of identical initializers and
	// reads the others through Identity nodes (all-ones norm weights).
	seen := map[string]string{}
	var identities []*onnxpb.NodeProto
	param := func(name string, t *onnx.Tensor) string {
		key := fmt.Sprint(t.DType, t.Shape, sha256.Sum256(onnx.EncodeRaw(t)))
		if first, ok := seen[key]; ok {
			op, nodeName := "Identity", "Identity_"+itoa(len(identities))
			identities = append(identities, &onnxpb.NodeProto{OpType: &op, Name: &nodeName, Input: []string{first}, Output: []string{name}})
			return name
		}
		seen[key] = name
		return g.init(name, t)
	}
	linear := func(name string, in, out int, s float64) string {
		t := draw(name, []int{out, in}, s, "normal")
		g.matmuls++
		return param("onnx::MatMul_"+itoa(g.matmuls), transpose2(t))
	}
	norm := func(name string) string {
		return param(name, draw(name, []int{hidden}, 0, "ones"))
	}

	top := newScope(g, "/")

	// position_ids = arange(seq_len).unsqueeze(0), seq_len = input_ids.shape[1].
	seq := top.op("Gather", []string{top.op("Shape", []string{"input_ids"}), top.scalar(1)}, attrInt("axis", 0))
	posIDs := top.unsqueeze(top.rangeTo(seq), 0)

	// Embeddings: tok_embeddings Gather, then norm.
	tok := param("embeddings.tok_embeddings.weight", draw("embeddings.tok_embeddings.weight", []int{cfg.Vocab, hidden}, std, "normal"))
	embNorm := norm("embeddings.norm.weight")
	words := newScope(g, "/embeddings/tok_embeddings/").op("Gather", []string{tok, "input_ids"})
	h := newScope(g, "/embeddings/norm/").layerNorm(words, embNorm, hidden, eps, "")

	// The masks, as transformers' masking utilities export: index vectors
	// batch [B,1,1,1], query [1,1,S,1] and key [1,1,1,S] from Range over
	// the runtime sizes; the padding mask gathered as
	// attention_mask[batch, key] through Flatten; the bidirectional rule
	// q ≥ 0; for local layers the band |q − k| ≤ window/2; all combined
	// with And, expanded to [B,1,S,S] and turned into an additive bias by
	// Where(allowed, 0, min_float32).
	maskB := top.cast("attention_mask", onnx.Bool)
	sq := top.dim(h, 1)      // query length
	skv := top.dim(maskB, 1) // key length
	batch := top.dim(h, 0)
	bIdx, qIdx, kvIdx := top.rangeTo(batch), top.rangeTo(sq), top.rangeTo(skv)
	bIdx = top.unsqueeze(top.unsqueeze(top.unsqueeze(bIdx, 1), 2), 3)
	qIdx = top.unsqueeze(top.unsqueeze(top.unsqueeze(qIdx, 0), 1), 3)
	kvIdx = top.unsqueeze(top.unsqueeze(top.unsqueeze(kvIdx, 0), 1), 2)
	yes := top.op("ConstantOfShape", []string{top.ints()}, attrTensor("value", boolTensorProto(true)))
	ge := top.cast(top.op("GreaterOrEqual", []string{qIdx, top.scalar(0)}), onnx.Bool)
	bidir := top.op("And", []string{yes, ge})
	// attention_mask[batch_idx, kv_idx].
	kvLen := top.op("Gather", []string{top.op("Shape", []string{maskB}), top.ints(1)}, attrInt("axis", 0))
	flat := top.op("Flatten", []string{maskB}, attrInt("axis", 2))
	lin := top.op("Add", []string{kvIdx, top.op("Mul", []string{bIdx, kvLen})})
	picked := top.op("Gather", []string{flat, lin}, attrInt("axis", 0))
	linShape := top.op("Shape", []string{lin})
	picked = top.op("Reshape", []string{picked, top.ints(-1)})
	picked = top.op("Reshape", []string{picked, top.op("Concat", []string{linShape}, attrInt("axis", 0))})
	pad := top.cast(picked, onnx.Bool)
	// expand(B, -1, Sq, Skv), with the -1 kept as 1.
	bias := func(allowed string) string {
		shape := top.op("Concat", []string{top.unsqueeze(batch, 0), top.ints(-1), top.unsqueeze(sq, 0), top.unsqueeze(skv, 0)}, attrInt("axis", 0))
		shape = top.op("Reshape", []string{shape, top.ints(-1)})
		ones := top.op("ConstantOfShape", []string{top.op("Shape", []string{shape})}, attrTensor("value", int64TensorProto(1)))
		neg := top.op("Mul", []string{ones, top.scalar(-1)})
		shape = top.op("Where", []string{top.op("Equal", []string{shape, neg}), ones, shape})
		ex := top.op("Expand", []string{allowed, shape})
		return top.op("Where", []string{ex, top.scalarF(0), top.scalarF(float32Min)})
	}
	globalBias := bias(top.op("And", []string{bidir, pad}))
	hasLocal := false
	for i := 0; i < cfg.Layers; i++ {
		hasLocal = hasLocal || !cfg.Global(i)
	}
	var localBias string
	if hasLocal {
		dist := top.op("Abs", []string{top.op("Sub", []string{qIdx, kvIdx})})
		inBand := top.cast(top.op("LessOrEqual", []string{dist, top.scalar(int64(cfg.Window / 2))}), onnx.Bool)
		band := top.op("And", []string{yes, inBand})
		band = top.cast(top.op("And", []string{band, ge}), onnx.Bool)
		band = top.op("And", []string{yes, band})
		localBias = bias(top.op("And", []string{band, pad}))
	}

	// Rotary tables: cos and sin [1, S, D] of position·inv_freq, the
	// frequencies repeated twice (transformers' ModernBertRotaryEmbedding,
	// called once per layer type).
	var posF string
	rotary := func(prefix string, theta float64) (cos, sin string) {
		r := newScope(g, prefix)
		if posF == "" {
			posF = r.cast(r.unsqueeze(posIDs, 2), onnx.Float)
		}
		inv := ropeInvFreq(theta, D)
		freqs := r.op("Mul", []string{posF, r.constant(onnx.NewFloat([]int{len(inv)}, inv))})
		emb := r.op("Concat", []string{freqs, freqs}, attrInt("axis", -1))
		cos = r.cast(r.op("Mul", []string{r.op("Cos", []string{emb}), r.scalarF(1)}), onnx.Float)
		sin = r.cast(r.op("Mul", []string{r.op("Sin", []string{emb}), r.scalarF(1)}), onnx.Float)
		return
	}
	gCos, gSin := rotary("/rotary_emb/", cfg.globalTheta())
	var lCos, lSin string
	if hasLocal {
		lCos, lSin = rotary("/rotary_emb_1/", cfg.localTheta())
	}

	// The batch and sequence sizes of a layer's input: the exporter reuses
	// the embedding output's (layer 0's attn_norm is an Identity).
	sizes := map[string][2]string{h: {batch, sq}}
	invSqrtD := float32(1 / math.Sqrt(float64(D)))

	for l := 0; l < cfg.Layers; l++ {
		sp := fmt.Sprintf("layers.%d.", l)
		pp := fmt.Sprintf("/layers.%d/", l)
		x := h
		if l > 0 {
			x = newScope(g, pp+"attn_norm/").layerNorm(h, norm(sp+"attn_norm.weight"), hidden, eps, "")
		}
		wqkv := linear(sp+"attn.Wqkv.weight", hidden, 3*hidden, std)
		wo := linear(sp+"attn.Wo.weight", hidden, hidden, outStd)
		mlpNorm := norm(sp + "mlp_norm.weight")
		wi := linear(sp+"mlp.Wi.weight", hidden, 2*inter, std)
		mo := linear(sp+"mlp.Wo.weight", inter, hidden, outStd)

		a := newScope(g, pp+"attn/")
		bs, ok := sizes[x]
		if !ok {
			bs = [2]string{a.dim(x, 0), a.dim(x, 1)}
		}
		qkv := newScope(g, pp+"attn/Wqkv/").op("MatMul", []string{x, wqkv})
		// qkv.view(B, S, 3, -1, D), unbound along the 3.
		shape := a.op("Concat", []string{a.unsqueeze(bs[0], 0), a.unsqueeze(bs[1], 0), a.ints(3), a.ints(-1), a.ints(int64(D))}, attrInt("axis", 0))
		qkv = a.op("Reshape", []string{qkv, shape})
		splitName := a.name("Split")
		split := make([]string, 3)
		for i := range split {
			split[i] = fmt.Sprintf("%s_output_%d", splitName, i)
		}
		if cfg.Opset >= 13 {
			g.nodeOut("Split", splitName, []string{qkv, a.ints(1, 1, 1)}, split, attrInt("axis", -3))
		} else {
			g.nodeOut("Split", splitName, []string{qkv}, split, attrInt("axis", -3), attrInts("split", 1, 1, 1))
		}
		parts := make([]string, 3)
		for i := range parts {
			parts[i] = a.squeeze(split[i], -3)
		}
		for i := range parts {
			parts[i] = a.op("Transpose", []string{parts[i]}, attrInts("perm", 0, 2, 1, 3))
		}
		q, k, v := parts[0], parts[1], parts[2]

		cos, sin, bias := gCos, gSin, globalBias
		if !cfg.Global(l) {
			cos, sin, bias = lCos, lSin, localBias
		}
		cos, sin = a.unsqueeze(cos, 1), a.unsqueeze(sin, 1)
		// x·cos + rotate_half(x)·sin, rotate_half(x) = cat(−x2, x1) with
		// x1, x2 the halves of the last axis.
		rope := func(x string) string {
			xf := a.cast(x, onnx.Float)
			c := a.op("Mul", []string{xf, cos})
			xf = a.cast(xf, onnx.Float)
			half := a.op("Div", []string{a.dim(xf, 3), a.scalar(2)})
			half = a.cast(a.cast(half, onnx.Int64), onnx.Int64)
			x1 := a.op("Slice", []string{xf, a.ints(0), a.unsqueeze(half, 0), a.ints(3), a.ints(1)})
			x2 := a.op("Slice", []string{xf, a.unsqueeze(half, 0), a.ints(math.MaxInt64), a.ints(3), a.ints(1)})
			rot := a.op("Concat", []string{a.op("Neg", []string{x2}), x1}, attrInt("axis", -1))
			return a.op("Add", []string{c, a.op("Mul", []string{rot, sin})})
		}
		q, k = rope(q), rope(k)
		q, k = a.cast(q, onnx.Float), a.cast(k, onnx.Float)
		kt := a.op("Transpose", []string{k}, attrInts("perm", 0, 1, 3, 2))
		scores := a.op("MatMul", []string{q, kt})
		scores = a.op("Mul", []string{scores, a.scalarF(invSqrtD)})
		scores = a.op("Add", []string{scores, bias})
		probs := a.op("Softmax", []string{scores}, attrInt("axis", -1))
		probs = a.cast(a.cast(probs, onnx.Float), onnx.Float)
		ctx := a.op("MatMul", []string{probs, v})
		ctx = a.op("Transpose", []string{ctx}, attrInts("perm", 0, 2, 1, 3))
		ctx = a.op("Reshape", []string{ctx, a.op("Concat", []string{a.unsqueeze(bs[0], 0), a.unsqueeze(bs[1], 0), a.ints(-1)}, attrInt("axis", 0))})
		o := newScope(g, pp+"attn/Wo/").op("MatMul", []string{ctx, wo})
		ls := newScope(g, pp)
		h = ls.op("Add", []string{h, o})

		// mlp: Wi, chunk(2, -1) into input and gate, Wo(gelu(input)·gate).
		m := newScope(g, pp+"mlp_norm/").layerNorm(h, mlpNorm, hidden, eps, "")
		ms := newScope(g, pp+"mlp/")
		f := newScope(g, pp+"mlp/Wi/").op("MatMul", []string{m, wi})
		fShape := ms.op("Shape", []string{f})
		axes := ms.ints(-1)
		last := ms.op("Gather", []string{fShape, axes}, attrInt("axis", 0))
		start := ms.ints(0)
		chunk := ms.op("Div", []string{ms.op("Add", []string{last, ms.ints(1)}), ms.ints(2)})
		end0 := ms.op("Mul", []string{chunk, ms.ints(1)})
		input := ms.op("Slice", []string{f, start, end0, axes})
		end1 := ms.op("Mul", []string{chunk, ms.ints(2)})
		gate := ms.op("Slice", []string{f, end0, end1, axes})
		act := newScope(g, pp+"mlp/act/")
		e := act.op("Div", []string{input, act.scalarF(float32(math.Sqrt2))})
		e = act.op("Erf", []string{e})
		e = act.op("Add", []string{e, act.scalarF(1)})
		e = act.op("Mul", []string{input, e})
		e = act.op("Mul", []string{e, act.scalarF(0.5)})
		gated := ms.op("Mul", []string{e, gate})
		o = newScope(g, pp+"mlp/Wo/").op("MatMul", []string{gated, mo})
		h = ls.op("Add", []string{h, o})
	}
	newScope(g, "/final_norm/").layerNorm(h, norm("final_norm.weight"), hidden, eps, "last_hidden_state")

	if err := w.done(g, "ModernBERT"); err != nil {
		return nil, err
	}

	doc := fmt.Sprintf("ModernBERT: hidden %d, heads %d, layers %d, intermediate %d, vocab %d, positions %d, window %d, global every %d, rope theta %g/%g, seed %d",
		hidden, H, cfg.Layers, inter, cfg.Vocab, cfg.MaxPositions, cfg.Window, cfg.GlobalEvery, cfg.globalTheta(), cfg.localTheta(), cfg.Seed)
	outputs := []*onnxpb.ValueInfoProto{
		onnx.MakeValueInfo("last_hidden_state", onnx.Float, append(batchSeq(), onnx.Dim{Value: int64(hidden)})),
	}
	return g.model(append(identities, g.nodes...), []string{"input_ids", "attention_mask"}, outputs, doc, len(cfg.Weights)), nil
}

// boolTensorProto and int64TensorProto are the one-element values of
// ConstantOfShape.
func boolTensorProto(v bool) *onnxpb.TensorProto {
	tp, _ := onnx.EncodeTensor("", &onnx.Tensor{DType: onnx.Bool, Shape: []int{1}, Data: []bool{v}})
	tp.Name = nil
	return tp
}

func int64TensorProto(v int64) *onnxpb.TensorProto {
	tp, _ := onnx.EncodeTensor("", onnx.NewInt64([]int{1}, []int64{v}))
	tp.Name = nil
	return tp
}
