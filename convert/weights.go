package convert

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Weights price a forward pass in multiply-accumulate equivalents
// (MAC-eq): one MAC of the projections' and FFN's GEMMs costs 1, and the
// rest of the work is priced relative to it. The zero value counts MACs
// only.
type Weights struct {
	// Original, Fused, Flash and Linear are the cost of one attention-core
	// MAC of the unfused original (batched n×n products), of onnxruntime's
	// fused and flash kernels, and of the linear forms' GEMMs; 0 stands
	// for 1.
	Original float64 `json:"original"`
	Fused    float64 `json:"fused"`
	Flash    float64 `json:"flash"`
	Linear   float64 `json:"linear"`
	// Pass is the cost of one element of the attention core's elementwise
	// ops, reductions and copies (LayerCost.Elementwise): memory-bound
	// work a GEMM does not do.
	Pass float64 `json:"pass"`
	// Exp is the cost of one exponential (LayerCost.Exps) beyond the pass
	// it is part of.
	Exp float64 `json:"exp"`
	// FusedToken and FlashToken are costs per token and hidden unit of
	// onnxruntime's fused and flash attention kernels beyond their MACs
	// (they repack Q, K and V into their own layout and split the work
	// into blocks): what makes them slower than the unfused original at a
	// few hundred tokens.
	FusedToken float64 `json:"fused_token"`
	FlashToken float64 `json:"flash_token"`
	// Token is a cost per token and hidden unit per layer that every form
	// has: the norms, residual adds, biases, activations and rotary
	// embeddings around the products, memory-bound work the MACs do not
	// count.
	Token float64 `json:"token"`
	// Layer is a fixed cost per layer, the same for every form: the
	// launching of its ops, which does not grow with the length.
	Layer float64 `json:"layer"`
}

// DefaultWeights are the weights `convert inspect --cost` and `convert
// bench` use unless told otherwise: fitted (cmd/internal/costfit) to the
// time ratios of three models' runs, each priced by its own dimensions
// and each weighing the same in the fit: docs/bench-crossover.json
// (BERT-base width, 2 layers, 384 to 4096 tokens, with onnxruntime's
// fused and flash forms), docs/bench-longctx.json (ModernBERT-shaped, 6
// layers, hidden 384, GeGLU FFN, window layers; 2048 and 8192 tokens) and
// docs/bench-gte.json (gte-base-en-v1.5's shape at full size: 12 layers,
// hidden 768, GLU FFN 6144 in, 3072 out; 1024 to 8192 tokens),
// onnxruntime 1.30 with 2 threads on this project's 2-core machine
// (`bin/linlab fit-cost docs/bench-crossover.json docs/bench-longctx.json
// docs/bench-gte.json` prints them, to 3 digits; a test in
// cmd/internal/benchrun checks that they are what the fit of those files
// gives). They are effective weights: a softmax form's core MACs and
// passes both grow as n², so only their sum is determined. On runs the
// fit did not see they predict the time ratios between forms to 4.2 %
// RMS on ModernBERT-base at full size (22 layers, 14 of them window
// layers; docs/bench-fullsize.json), 7.5 % on nomic-embed-text-v1.5's
// shape (docs/bench-nomic.json), 6.8 % on jina-embeddings-v2-base's
// (docs/bench-jina-v2.json) and 5.9 % on XLM-RoBERTa-large's, bge-m3's
// encoder, whose width (1024) no fitted run has
// (docs/bench-xlmr-large.json). `convert bench --fit` fits them on another
// machine.
var DefaultWeights = Weights{Original: 0.355, Fused: 0.469, Flash: 0.347, Linear: 1, Pass: 23.5, Exp: 0.234,
	FusedToken: 261, FlashToken: 587, Token: 12.4, Layer: 3.69e6}

// Normalized returns w with every zero core weight set to 1.
func (w Weights) Normalized() Weights {
	for _, p := range []*float64{&w.Original, &w.Fused, &w.Flash, &w.Linear} {
		if *p == 0 {
			*p = 1
		}
	}
	return w
}

// core is the cost of one core MAC of form f.
func (w Weights) core(f Form) float64 {
	w = w.Normalized()
	switch f {
	case Original:
		return w.Original
	case Fused:
		return w.Fused
	case Flash:
		return w.Flash
	}
	return w.Linear
}

// token is the cost per token and hidden unit of form f beyond its MACs.
func (w Weights) token(f Form) float64 {
	switch f {
	case Fused:
		return w.FusedToken
	case Flash:
		return w.FlashToken
	}
	return 0
}

// weightFields names the weights in the order String writes them.
var weightFields = []struct {
	name string
	get  func(*Weights) *float64
}{
	{"original", func(w *Weights) *float64 { return &w.Original }},
	{"fused", func(w *Weights) *float64 { return &w.Fused }},
	{"flash", func(w *Weights) *float64 { return &w.Flash }},
	{"linear", func(w *Weights) *float64 { return &w.Linear }},
	{"pass", func(w *Weights) *float64 { return &w.Pass }},
	{"exp", func(w *Weights) *float64 { return &w.Exp }},
	{"fused-token", func(w *Weights) *float64 { return &w.FusedToken }},
	{"flash-token", func(w *Weights) *float64 { return &w.FlashToken }},
	{"token", func(w *Weights) *float64 { return &w.Token }},
	{"layer", func(w *Weights) *float64 { return &w.Layer }},
}

// String writes w as ParseWeights reads it, e.g.
// "original=0.41,fused=0.4,flash=0.64,linear=1,pass=44,exp=0.7,fused-token=0,flash-token=0,token=0,layer=9.5e+08".
func (w Weights) String() string {
	w = w.Normalized()
	parts := make([]string, len(weightFields))
	for i, f := range weightFields {
		parts[i] = f.name + "=" + strconv.FormatFloat(*f.get(&w), 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// Check reports a weight that is negative, NaN or infinite.
func (w Weights) Check() error {
	for _, f := range weightFields {
		if v := *f.get(&w); !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("convert: cost weight %s = %v: want a finite number ≥ 0", f.name, v)
		}
	}
	return nil
}

// ParseWeights reads weights written as "default" (DefaultWeights),
// "macs" (the zero Weights: MACs only), or a comma-separated list of
// name=value pairs over original, fused, flash, linear, pass, exp,
// fused-token, flash-token, token and layer, starting from DefaultWeights: "pass=30,exp=2" changes two.
func ParseWeights(s string) (Weights, error) {
	switch strings.TrimSpace(s) {
	case "", "default":
		return DefaultWeights, nil
	case "macs":
		return Weights{}, nil
	}
	w := DefaultWeights
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Weights{}, fmt.Errorf("convert: cost weights %q: %q is not name=value", s, part)
		}
		var p *float64
		for _, f := range weightFields {
			if f.name == strings.TrimSpace(name) {
				p = f.get(&w)
			}
		}
		if p == nil {
			return Weights{}, fmt.Errorf("convert: cost weights %q: unknown weight %q (want original, fused, flash, linear, pass, exp, fused-token, flash-token, token or layer)", s, name)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return Weights{}, fmt.Errorf("convert: cost weights %q: %s: %v", s, name, err)
		}
		*p = v
	}
	return w, w.Check()
}
