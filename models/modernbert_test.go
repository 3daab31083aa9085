package models

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// mbTestWeights draws every ModernBertModel parameter under its state-dict
// name. The projections are larger than the 0.02 of a fresh model so that
// attention is far from uniform (scores of a few units) and a wrong band,
// rotation or mask shows in the output.
func mbTestWeights(cfg ModernBERTConfig, seed uint64) map[string]*onnx.Tensor {
	rng := rand.New(rand.NewPCG(seed, 77))
	ws := map[string]*onnx.Tensor{}
	put := func(name string, mean, std float64, shape ...int) {
		d := make([]float32, onnx.NumElements(shape))
		for i := range d {
			d[i] = float32(mean + std*rng.NormFloat64())
		}
		ws[name] = onnx.NewFloat(shape, d)
	}
	h, f := cfg.Hidden, cfg.Intermediate
	put("embeddings.tok_embeddings.weight", 0, 1, cfg.Vocab, h)
	put("embeddings.norm.weight", 1, 0.1, h)
	for l := 0; l < cfg.Layers; l++ {
		p := fmt.Sprintf("layers.%d.", l)
		if l > 0 {
			put(p+"attn_norm.weight", 1, 0.1, h)
		}
		put(p+"attn.Wqkv.weight", 0, 0.3, 3*h, h)
		put(p+"attn.Wo.weight", 0, 0.2, h, h)
		put(p+"mlp_norm.weight", 1, 0.1, h)
		put(p+"mlp.Wi.weight", 0, 0.2, 2*f, h)
		put(p+"mlp.Wo.weight", 0, 0.1, h, f)
	}
	put("final_norm.weight", 1, 0.1, h)
	return ws
}

// refModernBERT is a direct float64 implementation of ModernBertModel's
// forward pass (eager attention) from the state-dict weights: bias-free
// LayerNorms, layer 0 without attn_norm, rotary embeddings in the
// rotate-half form (the angles position·inv_freq rounded to float32 as
// transformers computes them), global layers masked by padding only, local
// layers also by the band |i − j| ≤ window/2 (noBand: not, to show that
// the band matters), GeGLU with the exact Gelu. It returns
// last_hidden_state [B,S,hidden] flattened.
func refModernBERT(cfg ModernBERTConfig, ws map[string]*onnx.Tensor, ids, mask []int64, B, S int, noBand bool) []float64 {
	h, H, D, F := cfg.Hidden, cfg.Heads, cfg.HeadDim(), cfg.Intermediate
	get := func(name string) []float64 {
		t, ok := ws[name]
		if !ok {
			panic("reference: no weight " + name)
		}
		out := make([]float64, t.Len())
		for i, v := range t.Floats() {
			out[i] = float64(v)
		}
		return out
	}
	layerNorm := func(x []float64, name string) []float64 {
		g := get(name)
		y := make([]float64, len(x))
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
			sd := math.Sqrt(vr/float64(h) + 1e-5)
			for i, v := range row {
				y[r*h+i] = (v - mean) / sd * g[i]
			}
		}
		return y
	}
	// linear: y[r, o] = Σ_i x[r, i]·W[o, i] (PyTorch layout, no bias).
	linear := func(x []float64, in int, name string) []float64 {
		W := get(name)
		out := len(W) / in
		rows := len(x) / in
		y := make([]float64, rows*out)
		for r := 0; r < rows; r++ {
			for o := 0; o < out; o++ {
				s := 0.0
				for i := 0; i < in; i++ {
					s += x[r*in+i] * W[o*in+i]
				}
				y[r*out+o] = s
			}
		}
		return y
	}
	// rope rotates a head vector at position s in place.
	rope := func(v []float64, s int, theta float64) {
		half := D / 2
		rot := make([]float64, D)
		for d := 0; d < D; d++ {
			f := d % half
			inv := float32(1 / math.Pow(theta, float64(float32(2*f)/float32(D))))
			ang := float64(float32(s) * inv)
			var other float64 // rotate_half(v)[d]
			if d < half {
				other = -v[d+half]
			} else {
				other = v[d-half]
			}
			rot[d] = v[d]*math.Cos(ang) + other*math.Sin(ang)
		}
		copy(v, rot)
	}
	tok := get("embeddings.tok_embeddings.weight")
	x := make([]float64, B*S*h)
	for r := 0; r < B*S; r++ {
		copy(x[r*h:(r+1)*h], tok[int(ids[r])*h:(int(ids[r])+1)*h])
	}
	x = layerNorm(x, "embeddings.norm.weight")
	minF := -float64(math.MaxFloat32)
	for l := 0; l < cfg.Layers; l++ {
		p := fmt.Sprintf("layers.%d.", l)
		global := l%cfg.GlobalEvery == 0
		theta := 160000.0
		if !global {
			theta = 10000
		}
		xn := x
		if l > 0 {
			xn = layerNorm(x, p+"attn_norm.weight")
		}
		qkv := linear(xn, h, p+"attn.Wqkv.weight")
		// q, k, v [B, H, S, D], rotated.
		q, k, v := make([]float64, B*S*h), make([]float64, B*S*h), make([]float64, B*S*h)
		for b := 0; b < B; b++ {
			for s := 0; s < S; s++ {
				for hd := 0; hd < H; hd++ {
					o := ((b*H+hd)*S + s) * D
					src := (b*S+s)*3*h + hd*D
					copy(q[o:o+D], qkv[src:src+D])
					copy(k[o:o+D], qkv[src+h:src+h+D])
					copy(v[o:o+D], qkv[src+2*h:src+2*h+D])
					rope(q[o:o+D], s, theta)
					rope(k[o:o+D], s, theta)
				}
			}
		}
		ctx := make([]float64, B*S*h)
		sc := make([]float64, S)
		for b := 0; b < B; b++ {
			for hd := 0; hd < H; hd++ {
				base := (b*H + hd) * S * D
				for i := 0; i < S; i++ {
					mx := math.Inf(-1)
					for j := 0; j < S; j++ {
						dot := 0.0
						for d := 0; d < D; d++ {
							dot += q[base+i*D+d] * k[base+j*D+d]
						}
						allowed := mask[b*S+j] != 0
						if !global && !noBand && (i-j > cfg.Window/2 || j-i > cfg.Window/2) {
							allowed = false
						}
						sc[j] = dot / math.Sqrt(float64(D))
						if !allowed {
							sc[j] += minF
						}
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
							acc += sc[j] / sum * v[base+j*D+d]
						}
						ctx[(b*S+i)*h+hd*D+d] = acc
					}
				}
			}
		}
		a := linear(ctx, h, p+"attn.Wo.weight")
		for i := range x {
			x[i] += a[i]
		}
		wi := linear(layerNorm(x, p+"mlp_norm.weight"), h, p+"mlp.Wi.weight")
		g := make([]float64, B*S*F)
		for r := 0; r < B*S; r++ {
			for i := 0; i < F; i++ {
				u, gate := wi[r*2*F+i], wi[r*2*F+F+i]
				g[r*F+i] = u * 0.5 * (1 + math.Erf(u/math.Sqrt2)) * gate
			}
		}
		o := linear(g, F, p+"mlp.Wo.weight")
		for i := range x {
			x[i] += o[i]
		}
	}
	return layerNorm(x, "final_norm.weight")
}

func openModernBERT(t *testing.T, m *onnxpb.ModelProto) infer.Session {
	t.Helper()
	if !infertest.ORT(t) {
		t.Skip("onnxruntime not available")
	}
	s, err := infer.Open("ort", m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatalf("onnxruntime rejects the model: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func buildModernBERT(t *testing.T, cfg ModernBERTConfig) *onnxpb.ModelProto {
	t.Helper()
	m, err := ModernBERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mbInputs(rng *rand.Rand, vocab, B, S int, lengths []int) (ids, mask []int64) {
	ids, mask = make([]int64, B*S), make([]int64, B*S)
	for b := 0; b < B; b++ {
		for s := 0; s < S; s++ {
			ids[b*S+s] = int64(rng.IntN(vocab))
			if s < lengths[b] {
				mask[b*S+s] = 1
			}
		}
	}
	return
}

func runModernBERT(t *testing.T, s infer.Session, ids, mask []int64, B, S int) []float32 {
	t.Helper()
	out, err := s.Run(map[string]*onnx.Tensor{
		"input_ids":      onnx.NewInt64([]int{B, S}, ids),
		"attention_mask": onnx.NewInt64([]int{B, S}, mask),
	})
	if err != nil {
		t.Fatal(err)
	}
	lh := out["last_hidden_state"]
	if lh == nil || lh.Len() != B*S*int(lh.Shape[2]) {
		t.Fatalf("last_hidden_state missing or misshapen: %v", out)
	}
	return lh.Floats()
}

// TestModernBERTMatchesReference runs built models in onnxruntime and
// compares them with the float64 reference, over opsets (LayerNorm op vs
// decomposition, Split/Squeeze/Unsqueeze attribute vs input forms), with a
// padded batch, at lengths where the window (16, ±8) leaves most keys out
// of a local layer's band. It also checks that the band matters: the
// reference without it is far off.
func TestModernBERTMatchesReference(t *testing.T) {
	base := ModernBERTConfig{Vocab: 50, Hidden: 32, Heads: 4, Layers: 4, Intermediate: 48,
		GlobalEvery: 3, Window: 16, MaxPositions: 256}
	cases := []struct{ opset, S int }{{17, 37}, {17, 150}, {12, 37}, {13, 150}, {18, 37}, {21, 150}}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("opset%d_S%d", tc.opset, tc.S), func(t *testing.T) {
			cfg := base
			cfg.Opset = tc.opset
			cfg.Weights = mbTestWeights(cfg, uint64(i+1))
			s := openModernBERT(t, buildModernBERT(t, cfg))
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			const B = 2
			ids, mask := mbInputs(rng, cfg.Vocab, B, tc.S, []int{tc.S, tc.S * 2 / 3})
			got := runModernBERT(t, s, ids, mask, B, tc.S)
			want := refModernBERT(cfg, cfg.Weights, ids, mask, B, tc.S, false)
			d := maxAbsDiff(got, want)
			if d > 1e-4 || math.IsNaN(d) {
				t.Errorf("max |ORT − float64 reference| = %.3g, want ≤ 1e-4", d)
			}
			noBand := maxAbsDiff(got, refModernBERT(cfg, cfg.Weights, ids, mask, B, tc.S, true))
			if noBand < 0.05 {
				t.Errorf("the reference without the band is only %.3g off: the test does not see the band", noBand)
			}
			t.Logf("max |ORT − reference| %.3g; without the band %.3g", d, noBand)
		})
	}
}

// TestModernBERTNativeMatchesReference: the Go backend runs the built
// model too (every op of it), and agrees with the reference; this part
// needs no onnxruntime.
func TestModernBERTNativeMatchesReference(t *testing.T) {
	cfg := ModernBERTConfig{Vocab: 50, Hidden: 32, Heads: 4, Layers: 4, Intermediate: 48,
		GlobalEvery: 3, Window: 16, MaxPositions: 256, Opset: 17}
	cfg.Weights = mbTestWeights(cfg, 11)
	s, err := infer.Open("native", buildModernBERT(t, cfg), infer.Options{Threads: 1})
	if err != nil {
		t.Fatalf("the native backend rejects the model: %v", err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(6, 6))
	const B, S = 2, 150
	ids, mask := mbInputs(rng, cfg.Vocab, B, S, []int{S, 77})
	got := runModernBERT(t, s, ids, mask, B, S)
	if d := maxAbsDiff(got, refModernBERT(cfg, cfg.Weights, ids, mask, B, S, false)); d > 1e-4 || math.IsNaN(d) {
		t.Errorf("max |native − float64 reference| = %.3g, want ≤ 1e-4", d)
	}
}

// TestModernBERTPaddingInvariance: padding a sequence (mask 0, arbitrary
// ids) leaves the outputs of its real tokens unchanged, in global and
// local layers alike.
func TestModernBERTPaddingInvariance(t *testing.T) {
	cfg := ModernBERTTinyConfig()
	cfg.Weights = mbTestWeights(cfg, 9)
	s := openModernBERT(t, buildModernBERT(t, cfg))
	rng := rand.New(rand.NewPCG(3, 3))
	const n, S = 29, 60
	ids, mask := mbInputs(rng, cfg.Vocab, 1, S, []int{n})
	padded := runModernBERT(t, s, ids, mask, 1, S)
	short := runModernBERT(t, s, ids[:n], mask[:n], 1, n)
	worst := 0.0
	for i := 0; i < n*cfg.Hidden; i++ {
		worst = math.Max(worst, math.Abs(float64(padded[i]-short[i])))
	}
	if worst > 1e-5 {
		t.Errorf("padding changed real tokens' outputs by up to %.3g", worst)
	}
}

// TestModernBERTMatchesFixture: with the weights of the real export
// testdata/fixtures/modernbert_eager_op17.onnx (transformers'
// ModernBertModel, TorchScript exporter, 2 layers: global then local with
// window 4), the built graph has the same ops, node for node by type, and
// computes the same outputs.
func TestModernBERTMatchesFixture(t *testing.T) {
	fx, err := onnx.Load(filepath.Join("..", "testdata", "fixtures", "modernbert_eager_op17.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := ModernBERTConfig{Vocab: 100, Hidden: 32, Heads: 4, Layers: 2, Intermediate: 64,
		GlobalEvery: 2, Window: 4, MaxPositions: 64, Opset: 17}
	// The fixture's parameters under their state-dict names: the norms'
	// (all ones, shared through Identity nodes) and the embedding by name
	// ("m." is the fixture's wrapper), the projections by the MatMul that
	// reads them, transposed back to PyTorch's layout.
	inits := map[string]*onnxpb.TensorProto{}
	for _, tp := range fx.Graph.Initializer {
		inits[tp.GetName()] = tp
	}
	alias := map[string]string{}
	for _, n := range fx.Graph.Node {
		if n.GetOpType() == "Identity" {
			alias[n.Output[0]] = n.Input[0]
		}
	}
	decode := func(name string) *onnx.Tensor {
		if a, ok := alias[name]; ok {
			name = a
		}
		tp := inits[name]
		if tp == nil {
			t.Fatalf("fixture has no initializer %q", name)
		}
		x, err := onnx.DecodeTensor(tp)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	ws := map[string]*onnx.Tensor{}
	for _, name := range []string{"embeddings.tok_embeddings.weight", "embeddings.norm.weight", "layers.1.attn_norm.weight",
		"layers.0.mlp_norm.weight", "layers.1.mlp_norm.weight", "final_norm.weight"} {
		ws[name] = decode("m." + name)
	}
	proj := regexp.MustCompile(`^/m/layers\.(\d+)/(attn/Wqkv|attn/Wo|mlp/Wi|mlp/Wo)/MatMul$`)
	for _, n := range fx.Graph.Node {
		if m := proj.FindStringSubmatch(n.GetName()); m != nil {
			ws["layers."+m[1]+"."+strings.ReplaceAll(m[2], "/", ".")+".weight"] = transpose2(decode(n.Input[1]))
		}
	}
	if len(ws) != 6+4*cfg.Layers {
		t.Fatalf("found %d of the fixture's %d parameters", len(ws), 6+4*cfg.Layers)
	}
	cfg.Weights = ws
	m := buildModernBERT(t, cfg)

	count := func(m *onnxpb.ModelProto) map[string]int {
		c := map[string]int{}
		for _, n := range m.Graph.Node {
			c[n.GetOpType()]++
		}
		return c
	}
	have, want := count(m), count(fx)
	for op, n := range want {
		if have[op] != n {
			t.Errorf("%s nodes: built %d, the export has %d", op, have[op], n)
		}
	}
	for op, n := range have {
		if want[op] == 0 {
			t.Errorf("%s nodes: built %d, the export has none", op, n)
		}
	}

	sFx, sBuilt := openModernBERT(t, fx), openModernBERT(t, m)
	rng := rand.New(rand.NewPCG(8, 8))
	const B, S = 2, 13
	ids, mask := mbInputs(rng, cfg.Vocab, B, S, []int{S, 6})
	a, b := runModernBERT(t, sFx, ids, mask, B, S), runModernBERT(t, sBuilt, ids, mask, B, S)
	worst := 0.0
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
	}
	if worst > 1e-5 || math.IsNaN(worst) {
		t.Errorf("max |export − built| = %.3g, want ≤ 1e-5", worst)
	}
	if d := maxAbsDiff(b, refModernBERT(cfg, ws, ids, mask, B, S, false)); d > 1e-4 {
		t.Errorf("max |built − float64 reference| = %.3g on the fixture's weights", d)
	}
}

// TestModernBERTMaskForms checks the node forms the converter looks for:
// each layer's scores get the bias of its kind, a local layer's built
// from Abs(Sub(query positions, key positions)) ≤ window/2 over Range
// values, a global layer's with no distance in it; each layer's rotation
// uses its kind's frequencies.
func TestModernBERTMaskForms(t *testing.T) {
	cfg := ModernBERTConfig{Vocab: 60, Hidden: 48, Heads: 6, Layers: 6, Intermediate: 64,
		GlobalEvery: 3, Window: 128, MaxPositions: 8192, Opset: 17, Seed: 3}
	m := buildModernBERT(t, cfg)
	prod := map[string]*onnxpb.NodeProto{}
	for _, n := range m.Graph.Node {
		for _, o := range n.Output {
			prod[o] = n
		}
	}
	op := func(v string) string {
		if n := prod[v]; n != nil {
			return n.GetOpType()
		}
		return "input"
	}
	// chain follows input idx of each op in turn from v and fails unless
	// the ops match; it returns the value reached.
	chain := func(v string, steps ...string) string {
		t.Helper()
		for _, s := range steps {
			name, idx, _ := strings.Cut(s, ":")
			if got := op(v); got != name {
				t.Fatalf("%s is %s, want %s (chain %v)", v, got, name, steps)
			}
			i, _ := strconv.Atoi(idx)
			v = prod[v].Input[i]
		}
		return v
	}
	constValue := func(v string) *onnx.Tensor {
		t.Helper()
		n := prod[v]
		if n == nil || n.GetOpType() != "Constant" {
			t.Fatalf("%s is not a Constant", v)
		}
		x, err := onnx.DecodeTensor(n.Attribute[0].T)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	reaches := func(v, target string) bool {
		seen := map[string]bool{}
		stack := []string{v}
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			n := prod[x]
			if seen[x] || n == nil {
				continue
			}
			seen[x] = true
			if n.GetOpType() == target {
				return true
			}
			stack = append(stack, n.Input...)
		}
		return false
	}
	layer := 0
	for _, n := range m.Graph.Node {
		if n.GetOpType() != "Softmax" {
			continue
		}
		add := prod[n.Input[0]]
		if add.GetOpType() != "Add" {
			t.Fatalf("layer %d: softmax of %s, want Add", layer, add.GetOpType())
		}
		bias := add.Input[1]
		// Where(Expand(allowed, shape), 0, min).
		where := prod[bias]
		if where.GetOpType() != "Where" || constValue(where.Input[1]).Floats()[0] != 0 ||
			constValue(where.Input[2]).Floats()[0] != -math.MaxFloat32 {
			t.Fatalf("layer %d: bias is not Where(cond, 0, min_float32)", layer)
		}
		allowed := chain(bias, "Where:0", "Expand:0")
		if cfg.Global(layer) {
			if reaches(bias, "Abs") {
				t.Errorf("layer %d is global but its bias has a distance in it", layer)
			}
		} else {
			// And(And(true, Cast(And(And(true, Cast(|q−k| ≤ w/2)), q ≥ 0))), padding).
			le := chain(allowed, "And:0", "And:1", "Cast:0", "And:0", "And:1", "Cast:0")
			if op(le) != "LessOrEqual" {
				t.Fatalf("layer %d: band test is %s, want LessOrEqual", layer, op(le))
			}
			if w := constValue(prod[le].Input[1]).Int64s()[0]; w != int64(cfg.Window/2) {
				t.Errorf("layer %d: band half-width %d, want %d", layer, w, cfg.Window/2)
			}
			sub := chain(prod[le].Input[0], "Abs:0")
			if op(sub) != "Sub" {
				t.Fatalf("layer %d: distance is Abs(%s), want Abs(Sub)", layer, op(sub))
			}
			for i, want := range []string{"query", "key"} {
				v := prod[sub].Input[i]
				for op(v) == "Unsqueeze" {
					v = prod[v].Input[0]
				}
				if op(v) != "Range" || op(prod[v].Input[1]) != "Cast" || !reaches(prod[v].Input[1], "Shape") {
					t.Errorf("layer %d: %s positions are %s, want Range(0, size from Shape)", layer, want, op(v))
				}
			}
		}
		// scores = MatMul(Cast(q·cos + rotate_half(q)·sin), kᵀ)·(1/√D):
		// the cos table's frequencies.
		inv := chain(add.Input[0], "Mul:0", "MatMul:0", "Cast:0", "Add:0", "Mul:1", "Unsqueeze:0",
			"Cast:0", "Mul:0", "Cos:0", "Concat:0", "Mul:1")
		theta := 160000.0
		if !cfg.Global(layer) {
			theta = 10000
		}
		if got, want := constValue(inv).Floats(), ropeInvFreq(theta, cfg.HeadDim()); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("layer %d: inverse frequencies %v, want θ = %g's %v", layer, got, theta, want)
		}
		layer++
	}
	if layer != cfg.Layers {
		t.Fatalf("%d softmax nodes, want %d", layer, cfg.Layers)
	}
}

// TestModernBERTRandomWeights: the seeded model (initializer_range 0.02)
// runs, and its outputs are LayerNorm-scaled and depend on the tokens and
// on their neighbours.
func TestModernBERTRandomWeights(t *testing.T) {
	cfg := ModernBERTTinyConfig()
	s := openModernBERT(t, buildModernBERT(t, cfg))
	rng := rand.New(rand.NewPCG(4, 4))
	const S = 40
	ids, mask := mbInputs(rng, cfg.Vocab, 1, S, []int{S})
	out := runModernBERT(t, s, ids, mask, 1, S)
	h := cfg.Hidden
	for i, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("output %d is %v", i, v)
		}
	}
	for p := 0; p < S; p++ {
		ss := 0.0
		for _, v := range out[p*h : (p+1)*h] {
			ss += float64(v) * float64(v)
		}
		if rms := math.Sqrt(ss / float64(h)); rms < 0.9 || rms > 1.1 {
			t.Errorf("position %d: rms %.3g, want ≈ 1 after the final norm", p, rms)
		}
	}
	// A neighbour within the window changes a token's output.
	changed := func(ids2 []int64, at int) float64 {
		o2 := runModernBERT(t, s, ids2, mask, 1, S)
		d := 0.0
		for i := at * h; i < (at+1)*h; i++ {
			d = math.Max(d, math.Abs(float64(out[i]-o2[i])))
		}
		return d
	}
	nb := append([]int64{}, ids...)
	nb[11] = (nb[11] + 1) % int64(cfg.Vocab)
	if d := changed(nb, 10); d < 1e-3 {
		t.Errorf("changing a neighbour moved a token's output by only %.3g", d)
	}
	// Tokens differ from one another: each dimension varies along the
	// sequence.
	for i := 0; i < h; i++ {
		mean, ss := 0.0, 0.0
		for p := 0; p < S; p++ {
			mean += float64(out[p*h+i]) / S
		}
		for p := 0; p < S; p++ {
			d := float64(out[p*h+i]) - mean
			ss += d * d / S
		}
		if math.Sqrt(ss) < 0.3 {
			t.Errorf("dimension %d varies by only %.3g along the sequence", i, math.Sqrt(ss))
		}
	}
}

func TestModernBERTDeterministic(t *testing.T) {
	cfg := ModernBERTTinyConfig()
	var enc [][]byte
	for i := 0; i < 2; i++ {
		b, err := onnx.Encode(buildModernBERT(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		enc = append(enc, b)
	}
	if !bytes.Equal(enc[0], enc[1]) {
		t.Fatal("same config gave different model bytes")
	}
	cfg.Seed++
	b, _ := onnx.Encode(buildModernBERT(t, cfg))
	if bytes.Equal(b, enc[0]) {
		t.Fatal("a different seed gave the same bytes")
	}
	if doc := buildModernBERT(t, cfg).GetDocString(); !strings.Contains(doc, "positions 512") || !strings.Contains(doc, "window 16") {
		t.Errorf("doc string %q does not record the positions and window", doc)
	}
}

func TestModernBERTRejectsBadConfig(t *testing.T) {
	good := ModernBERTTinyConfig()
	bad := []struct {
		f    func(*ModernBERTConfig)
		want string
	}{
		{func(c *ModernBERTConfig) { c.Hidden = 66 }, "not a multiple of heads"},
		{func(c *ModernBERTConfig) { c.Hidden, c.Heads = 60, 4 }, "must be even"}, // head dim 15
		{func(c *ModernBERTConfig) { c.Layers = 0 }, "layers must be positive"},
		{func(c *ModernBERTConfig) { c.GlobalEvery = 0 }, "global every must be positive"},
		{func(c *ModernBERTConfig) { c.Window = 0 }, "window must be positive"},
		{func(c *ModernBERTConfig) { c.Window = 15 }, "window 15 must be even"},
		{func(c *ModernBERTConfig) { c.MaxPositions = -1 }, "max positions must be positive"},
		{func(c *ModernBERTConfig) { c.Opset = 11 }, "opset 11 not supported"},
		{func(c *ModernBERTConfig) { c.Opset = 30 }, "opset 30 not supported"},
		{func(c *ModernBERTConfig) { c.InitStd = math.NaN() }, "init std"},
		{func(c *ModernBERTConfig) { c.LocalRopeTheta = 0.5 }, "local rope theta"},
		{func(c *ModernBERTConfig) {
			c.Weights = map[string]*onnx.Tensor{"layers.0.attn.Wqkv.weight": onnx.NewFloat([]int{2, 2}, make([]float32, 4))}
		}, "has shape [2 2]"},
		{func(c *ModernBERTConfig) {
			c.Weights = map[string]*onnx.Tensor{"layers.0.attn_norm.weight": onnx.NewFloat([]int{64}, make([]float32, 64))}
		}, "not ModernBERT parameters"},
	}
	for i, tc := range bad {
		c := good
		tc.f(&c)
		_, err := ModernBERT(c)
		if err == nil {
			t.Errorf("case %d: ModernBERT accepted an invalid config", i)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("case %d: error %q does not say %q", i, err, tc.want)
		}
	}
}
