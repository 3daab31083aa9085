package models

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
)

// testWeights draws every BertModel parameter under its state-dict name.
// The scale is larger than BERT's 0.02 so that attention is far from
// uniform and a wrong mask, scale or transpose shows in the output.
func testWeights(cfg Config, seed uint64) map[string]*onnx.Tensor {
	rng := rand.New(rand.NewPCG(seed, 99))
	ws := map[string]*onnx.Tensor{}
	put := func(name string, mean, std float64, shape ...int) {
		d := make([]float32, onnx.NumElements(shape))
		for i := range d {
			d[i] = float32(mean + std*rng.NormFloat64())
		}
		ws[name] = onnx.NewFloat(shape, d)
	}
	h, f := cfg.Hidden, cfg.Intermediate
	put("embeddings.word_embeddings.weight", 0, 0.5, cfg.Vocab, h)
	put("embeddings.position_embeddings.weight", 0, 0.5, cfg.MaxPositions, h)
	put("embeddings.token_type_embeddings.weight", 0, 0.5, cfg.TypeVocab, h)
	put("embeddings.LayerNorm.weight", 1, 0.1, h)
	put("embeddings.LayerNorm.bias", 0, 0.1, h)
	for l := 0; l < cfg.Layers; l++ {
		p := fmt.Sprintf("encoder.layer.%d.", l)
		for _, n := range []string{"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"} {
			put(p+n+".weight", 0, 0.15, h, h)
			put(p+n+".bias", 0, 0.1, h)
		}
		put(p+"intermediate.dense.weight", 0, 0.1, f, h)
		put(p+"intermediate.dense.bias", 0, 0.1, f)
		put(p+"output.dense.weight", 0, 0.05, h, f)
		put(p+"output.dense.bias", 0, 0.1, h)
		for _, n := range []string{"attention.output.LayerNorm", "output.LayerNorm"} {
			put(p+n+".weight", 1, 0.1, h)
			put(p+n+".bias", 0, 0.1, h)
		}
	}
	put("pooler.dense.weight", 0, 0.1, h, h)
	put("pooler.dense.bias", 0, 0.1, h)
	return ws
}

// refBERT is a direct float64 implementation of BertModel's forward pass
// (eager attention, exact Gelu, legacy additive mask) from the state-dict
// weights. It returns last_hidden_state [B,S,hidden] and pooler_output
// [B,hidden] flattened.
func refBERT(cfg Config, ws map[string]*onnx.Tensor, ids, types, mask []int64, B, S int) (last, pooled []float64) {
	h := cfg.Hidden
	get := func(name string) []float64 {
		f := ws[name].Floats()
		out := make([]float64, len(f))
		for i, v := range f {
			out[i] = float64(v)
		}
		return out
	}
	eps := 1e-12
	layerNorm := func(x []float64, gname, bname string) {
		g, b := get(gname), get(bname)
		for r := 0; r < len(x)/h; r++ {
			row := x[r*h : (r+1)*h]
			mean := 0.0
			for _, v := range row {
				mean += v
			}
			mean /= float64(h)
			vr := 0.0
			for _, v := range row {
				vr += (v - mean) * (v - mean)
			}
			vr /= float64(h)
			sd := math.Sqrt(vr + eps)
			for i := range row {
				row[i] = (row[i]-mean)/sd*g[i] + b[i]
			}
		}
	}
	// linear: y[r, o] = Σ_i x[r, i]·W[o, i] + b[o] (PyTorch layout).
	linear := func(x []float64, in int, name string) []float64 {
		W, bias := get(name+".weight"), get(name+".bias")
		out := len(bias)
		rows := len(x) / in
		y := make([]float64, rows*out)
		for r := 0; r < rows; r++ {
			for o := 0; o < out; o++ {
				s := bias[o]
				for i := 0; i < in; i++ {
					s += x[r*in+i] * W[o*in+i]
				}
				y[r*out+o] = s
			}
		}
		return y
	}
	word, pos, tt := get("embeddings.word_embeddings.weight"), get("embeddings.position_embeddings.weight"), get("embeddings.token_type_embeddings.weight")
	x := make([]float64, B*S*h)
	for b := 0; b < B; b++ {
		for s := 0; s < S; s++ {
			id, ty := ids[b*S+s], types[b*S+s]
			for i := 0; i < h; i++ {
				x[(b*S+s)*h+i] = word[int(id)*h+i] + tt[int(ty)*h+i] + pos[s*h+i]
			}
		}
	}
	layerNorm(x, "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias")
	H, D := cfg.Heads, cfg.HeadDim()
	minF := -float64(math.MaxFloat32)
	for l := 0; l < cfg.Layers; l++ {
		p := fmt.Sprintf("encoder.layer.%d.", l)
		q := linear(x, h, p+"attention.self.query")
		k := linear(x, h, p+"attention.self.key")
		v := linear(x, h, p+"attention.self.value")
		ctx := make([]float64, B*S*h)
		sc := make([]float64, S)
		for b := 0; b < B; b++ {
			for hd := 0; hd < H; hd++ {
				for i := 0; i < S; i++ {
					mx := math.Inf(-1)
					for j := 0; j < S; j++ {
						dot := 0.0
						for d := 0; d < D; d++ {
							dot += q[(b*S+i)*h+hd*D+d] * k[(b*S+j)*h+hd*D+d]
						}
						allowed := float64(mask[b*S+j])
						if cfg.Causal && j > i {
							allowed = 0
						}
						sc[j] = dot/math.Sqrt(float64(D)) + (1-allowed)*minF
						mx = math.Max(mx, sc[j])
					}
					sum := 0.0
					for j := range sc {
						sc[j] = math.Exp(sc[j] - mx)
						sum += sc[j]
					}
					for d := 0; d < D; d++ {
						acc := 0.0
						for j := 0; j < S; j++ {
							acc += sc[j] / sum * v[(b*S+j)*h+hd*D+d]
						}
						ctx[(b*S+i)*h+hd*D+d] = acc
					}
				}
			}
		}
		a := linear(ctx, h, p+"attention.output.dense")
		for i := range a {
			a[i] += x[i]
		}
		layerNorm(a, p+"attention.output.LayerNorm.weight", p+"attention.output.LayerNorm.bias")
		f := linear(a, h, p+"intermediate.dense")
		for i, u := range f {
			f[i] = u * 0.5 * (1 + math.Erf(u/math.Sqrt2))
		}
		o := linear(f, cfg.Intermediate, p+"output.dense")
		for i := range o {
			o[i] += a[i]
		}
		layerNorm(o, p+"output.LayerNorm.weight", p+"output.LayerNorm.bias")
		x = o
	}
	first := make([]float64, B*h)
	for b := 0; b < B; b++ {
		copy(first[b*h:(b+1)*h], x[b*S*h:b*S*h+h])
	}
	pooled = linear(first, h, "pooler.dense")
	for i := range pooled {
		pooled[i] = math.Tanh(pooled[i])
	}
	return x, pooled
}

func openORT(t *testing.T, cfg Config) infer.Session {
	t.Helper()
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime not available (install with scripts/setup.sh): %v", err)
	}
	m, err := BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := infer.Open("ort", m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatalf("onnxruntime rejects the built model (opset %d): %v", cfg.Opset, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func randomInputs(rng *rand.Rand, cfg Config, B, S int, lengths []int) (ids, types, mask []int64) {
	ids, types, mask = make([]int64, B*S), make([]int64, B*S), make([]int64, B*S)
	for b := 0; b < B; b++ {
		for s := 0; s < S; s++ {
			ids[b*S+s] = int64(rng.IntN(cfg.Vocab))
			types[b*S+s] = int64(rng.IntN(cfg.TypeVocab))
			if s < lengths[b] {
				mask[b*S+s] = 1
			}
		}
	}
	return
}

func run(t *testing.T, s infer.Session, ids, types, mask []int64, B, S int) (last, pooled []float32) {
	t.Helper()
	out, err := s.Run(map[string]*onnx.Tensor{
		"input_ids":      onnx.NewInt64([]int{B, S}, ids),
		"token_type_ids": onnx.NewInt64([]int{B, S}, types),
		"attention_mask": onnx.NewInt64([]int{B, S}, mask),
	})
	if err != nil {
		t.Fatal(err)
	}
	lh, po := out["last_hidden_state"], out["pooler_output"]
	if lh == nil || po == nil {
		t.Fatalf("outputs missing: %v", out)
	}
	return lh.Floats(), po.Floats()
}

func maxAbsDiff(a []float32, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

// TestBERTMatchesReference runs built models in onnxruntime and compares
// them with the float64 reference forward pass, over opsets (LayerNorm op vs
// decomposition, Unsqueeze/ReduceMean attribute vs input forms), K
// transposes and scale placements, with padded batches.
func TestBERTMatchesReference(t *testing.T) {
	base := Config{Vocab: 50, Hidden: 32, Heads: 4, Layers: 2, Intermediate: 64, MaxPositions: 24, TypeVocab: 2}
	cases := []struct {
		opset  int
		kt     KTranspose
		sc     ScaleForm
		causal bool
	}{
		{11, KPerm0231, ScaleDiv, false},
		{12, KTwoStep, ScaleMul, false},
		{13, KPerm0231, ScaleQ, false},
		{16, KTwoStep, ScaleDiv, false},
		{17, KPerm0231, ScaleDiv, false},
		{17, KTwoStep, ScaleQ, false},
		{18, KPerm0231, ScaleMul, false},
		{21, KTwoStep, ScaleDiv, false},
		{12, KPerm0231, ScaleDiv, true},
		{17, KTwoStep, ScaleMul, true},
		{21, KPerm0231, ScaleQ, true},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("opset%d_k%d_scale%d_causal%v", tc.opset, tc.kt, tc.sc, tc.causal), func(t *testing.T) {
			cfg := base
			cfg.Opset, cfg.KTranspose, cfg.Scale, cfg.Causal = tc.opset, tc.kt, tc.sc, tc.causal
			cfg.Weights = testWeights(cfg, uint64(i+1))
			s := openORT(t, cfg)
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			B, S := 3, 11
			ids, types, mask := randomInputs(rng, cfg, B, S, []int{11, 7, 1})
			last, pooled := run(t, s, ids, types, mask, B, S)
			rl, rp := refBERT(cfg, cfg.Weights, ids, types, mask, B, S)
			if d := maxAbsDiff(last, rl); d > 1e-4 || math.IsNaN(d) {
				t.Errorf("last_hidden_state: max |ORT − float64 reference| = %.3g, want ≤ 1e-4", d)
			}
			if d := maxAbsDiff(pooled, rp); d > 1e-4 || math.IsNaN(d) {
				t.Errorf("pooler_output: max |ORT − float64 reference| = %.3g, want ≤ 1e-4", d)
			}
		})
	}
}

// TestBERTPaddingInvariance: padding a sequence (mask 0, arbitrary ids)
// leaves the outputs of its real tokens unchanged.
func TestBERTPaddingInvariance(t *testing.T) {
	cfg := TinyConfig()
	cfg.Weights = testWeights(cfg, 5)
	s := openORT(t, cfg)
	rng := rand.New(rand.NewPCG(3, 3))
	const n, S = 9, 20
	ids, types, mask := randomInputs(rng, cfg, 1, S, []int{n})
	padded, pooledPadded := run(t, s, ids, types, mask, 1, S)
	short, pooledShort := run(t, s, ids[:n], types[:n], mask[:n], 1, n)
	h := cfg.Hidden
	worst := 0.0
	for i := 0; i < n*h; i++ {
		worst = math.Max(worst, math.Abs(float64(padded[i]-short[i])))
	}
	for i := range pooledShort {
		worst = math.Max(worst, math.Abs(float64(pooledPadded[i]-pooledShort[i])))
	}
	if worst > 1e-5 {
		t.Errorf("padding changed real tokens' outputs by up to %.3g", worst)
	}
}

func TestBERTDeterministic(t *testing.T) {
	cfg := TinyConfig()
	var enc [][]byte
	for i := 0; i < 2; i++ {
		m, err := BERT(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := onnx.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		enc = append(enc, b)
	}
	if !bytes.Equal(enc[0], enc[1]) {
		t.Fatal("same Config gave different model bytes")
	}
	cfg.Seed++
	m, _ := BERT(cfg)
	b, _ := onnx.Encode(m)
	if bytes.Equal(b, enc[0]) {
		t.Fatal("a different seed gave the same bytes")
	}
}

func TestBERTRejectsBadConfig(t *testing.T) {
	good := TinyConfig()
	bad := []func(*Config){
		func(c *Config) { c.Hidden = 66 },
		func(c *Config) { c.Layers = 0 },
		func(c *Config) { c.Opset = 10 },
		func(c *Config) { c.Opset = 30 },
		func(c *Config) { c.InitStd = math.NaN() },
		func(c *Config) { c.Causal, c.Opset = true, 11 },
		func(c *Config) {
			c.Weights = map[string]*onnx.Tensor{"embeddings.word_embeddings.weight": onnx.NewFloat([]int{2, 2}, make([]float32, 4))}
		},
		func(c *Config) {
			c.Weights = map[string]*onnx.Tensor{"no.such.weight": onnx.NewFloat([]int{1}, []float32{0})}
		},
	}
	for i, f := range bad {
		c := good
		f(&c)
		if _, err := BERT(c); err == nil {
			t.Errorf("case %d: BERT accepted an invalid config", i)
		}
	}
}
