package finetune

import (
	"fmt"
	"math"
	"sync"

	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// Linformer returns a copy of converted whose Linformer projections are
// fitted to the original model's attention on the calibration inputs feed
// (see the package documentation). Layers with their own projections are
// fitted one after the other; projections shared between layers
// ("layerwise") are fitted once, jointly, on the sum of the relative
// losses of the layers that share them, from one capture of those layers'
// inputs. It is guarded by held-out rows as Fit is (Options.HeldOut).
func Linformer(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options) (*onnxpb.ModelProto, *Report, error) {
	return fitGuarded(original, converted, feed, opt, []opFit{linformerFit})
}

// linformerFit is the fit of LinformerAttention nodes; Fit runs it first
// in a model that has several ops (rank 0).
var linformerFit = registerFit(opFit{op: ops.LinformerOp, rank: 0, fit: linformer})

// linformer is Linformer reporting progress on shared when it is set.
func linformer(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options, shared *progress.Reporter) (*onnxpb.ModelProto, *Report, error) {
	if err := opt.defaults(0.01); err != nil {
		return nil, nil, err
	}
	out, nodes, _, _, inits, err := prepareFit(original, converted, ops.LinformerOp, 5)
	if err != nil {
		return nil, nil, err
	}
	groups, err := groupByProjections(nodes)
	if err != nil {
		return nil, nil, err
	}
	ref, rep, train, held, err := startLayers(original, feed, nodes, &opt, ops.LinformerOp)
	if err != nil {
		return nil, nil, err
	}
	guarded := len(held) > 0
	prog := opt.reporter(shared, len(nodes))
	for _, group := range groups {
		probs, err := captureLinformer(out, inits, feed, opt, group, ref, rep.Rows)
		if err != nil {
			return nil, nil, err
		}
		trs := fitLinformerGroup(probs, opt, train, held)
		for i, ln := range group {
			rep.Layers = append(rep.Layers, layerReport(ln.layer, ln.node.GetName(), trs[i], guarded))
			reportLayer(prog, rep.Op, rep.Layers[len(rep.Layers)-1], guarded)
		}
		first := group[0].node
		e, f := probs[0].Params()
		if err := storeParams(out, inits, group[0].layer, []namedParam{{first.Input[3], e}, {first.Input[4], f}}); err != nil {
			return nil, nil, err
		}
	}
	return out, rep, nil
}

// groupByProjections groups the nodes by the projections E, F they read,
// in graph order: a group shares both, in the same roles.
func groupByProjections(nodes []targetNode) ([][]targetNode, error) {
	var groups [][]targetNode
	groupOf := map[string]int{}
	for _, ln := range nodes {
		e, f := ln.node.Input[3], ln.node.Input[4]
		ge, okE := groupOf[e]
		gf, okF := groupOf[f]
		switch {
		case !okE && !okF:
			groupOf[e], groupOf[f] = len(groups), len(groups)
			groups = append(groups, []targetNode{ln})
		case okE && okF && ge == gf:
			first := groups[ge][0].node
			if first.Input[3] != e || first.Input[4] != f {
				return nil, fmt.Errorf("finetune: node %s reads projections %q, %q in another role than node %s", ln.node.GetName(), e, f, first.GetName())
			}
			groups[ge] = append(groups[ge], ln)
		default:
			return nil, fmt.Errorf("finetune: node %s shares only one of its projections %q, %q with other layers", ln.node.GetName(), e, f)
		}
	}
	return groups, nil
}

// captureLinformer runs out on feed once for a group of layers sharing
// projections and returns their problems (targets in ref), which share one
// E and F, checked to hold the calibration's rows rows.
func captureLinformer(out *onnxpb.ModelProto, inits map[string]int, feed map[string]*onnx.Tensor, opt Options, group []targetNode, ref map[string]*onnx.Tensor, rows int) ([]*linformerProblem, error) {
	var expose []string
	for _, ln := range group {
		n := ln.node
		expose = exposeBias(append(expose, n.Input[0], n.Input[1], n.Input[2]), inits, linformerBias(n))
	}
	got, err := runOnce(out, feed, dedup(expose), opt)
	if err != nil {
		return nil, fmt.Errorf("finetune: converted model, layer %d: %w", group[0].layer, err)
	}
	first := group[0].node
	params := make([]*onnx.Tensor, 0, 2)
	for _, name := range []string{first.Input[3], first.Input[4]} {
		if _, ok := inits[name]; !ok {
			return nil, fmt.Errorf("finetune: layer %d: projection %q is not an initializer", group[0].layer, name)
		}
		t, err := floatInitializer(out, inits, group[0].layer, name)
		if err != nil {
			return nil, err
		}
		params = append(params, t)
	}
	var probs []*linformerProblem
	for _, ln := range group {
		n := ln.node
		bias, err := keyBias(out, inits, got, ln.layer, linformerBias(n))
		if err != nil {
			return nil, err
		}
		p := &linformerProblem{
			Q: got[n.Input[0]], K: got[n.Input[1]], V: got[n.Input[2]], Bias: bias, Y: ref[ln.target],
			E: params[0], F: params[1], SharedEF: first.Input[3] == first.Input[4],
			Scale: float64(onnx.AttrFloat(n, "scale", 0)),
		}
		if err := p.init(); err != nil {
			return nil, fmt.Errorf("finetune: layer %d (%s): %w", ln.layer, n.GetName(), err)
		}
		if p.b != rows {
			return nil, fmt.Errorf("finetune: layer %d (%s): %d batch rows, the calibration has %d", ln.layer, n.GetName(), p.b, rows)
		}
		if len(probs) > 0 {
			p.e, p.f = probs[0].e, probs[0].f // one set of parameters
		}
		probs = append(probs, p)
	}
	return probs, nil
}

// fitLinformerGroup fits the problems of one group (fitLinformer) and
// returns each layer's trace. One layer: its losses are the fit's. Layers
// sharing projections are fitted on the sum of their losses; each is
// measured apart, before and after.
func fitLinformerGroup(probs []*linformerProblem, opt Options, train, held []int) []adamTrace {
	if len(probs) == 1 {
		return []adamTrace{fitLinformer(probs, opt, train, held)}
	}
	guarded := len(held) > 0
	trs := make([]adamTrace, len(probs))
	for i, p := range probs {
		trs[i].trainBefore = p.LossGrad(train, nil, nil)
		if guarded {
			trs[i].heldBefore = p.LossGrad(held, nil, nil)
		}
	}
	tr := fitLinformer(probs, opt, train, held)
	for i, p := range probs {
		trs[i].steps, trs[i].kept = tr.steps, tr.kept
		trs[i].trainAfter = p.LossGrad(train, nil, nil)
		if guarded {
			trs[i].heldAfter = p.LossGrad(held, nil, nil)
		}
	}
	return trs
}

// linformerBias names the key-bias input of a LinformerAttention node
// (its sixth), or "" when it has none.
func linformerBias(n *onnxpb.NodeProto) string {
	if len(n.Input) > 5 {
		return n.Input[5]
	}
	return ""
}

// linformerProblem is the fit of one layer's projections: minimise
// Σ‖out − Y‖²/Σ‖Y‖² over the valid query rows, with out the
// LinformerAttention of (Q, K, V, E, F, Bias) and scale Scale (0: 1/√D).
type linformerProblem struct {
	Q, K, V, Y *onnx.Tensor // [B,H,S,D], [B,H,S,D], [B,H,S,Dv], [B,H,S,Dv]
	E, F       *onnx.Tensor // [H or 1, k, N]
	Bias       *onnx.Tensor // [B or 1,1,1,S or 1] or nil
	SharedEF   bool         // E and F are one parameter
	Scale      float64

	b, h, s, d, dv, k, n, he, hf int
	q, kk, v, y                  []float64
	valid                        []bool // [B*S]: key (and query) j of batch b is real
	e, f                         []float64
	rowNorm                      []float64 // Σ‖Y‖² over the valid query rows of each batch row
}

func (p *linformerProblem) init() error {
	for _, t := range []*onnx.Tensor{p.Q, p.K, p.V, p.Y, p.E, p.F} {
		if t == nil || t.DType != onnx.Float || len(t.Shape) != 4 && len(t.Shape) != 3 {
			return fmt.Errorf("missing or malformed tensor")
		}
	}
	if len(p.Q.Shape) != 4 || len(p.K.Shape) != 4 || len(p.V.Shape) != 4 {
		return fmt.Errorf("queries, keys and values must be [B,H,S,D]")
	}
	y, err := headsLayout(p.Y, p.V.Shape[0], p.V.Shape[1], p.V.Shape[2], p.V.Shape[3])
	if err != nil {
		return err
	}
	p.Y = y
	p.b, p.h, p.s, p.d = p.Q.Shape[0], p.Q.Shape[1], p.Q.Shape[2], p.Q.Shape[3]
	p.dv = p.V.Shape[3]
	if fmt.Sprint(p.K.Shape) != fmt.Sprint(p.Q.Shape) || p.V.Shape[0] != p.b || p.V.Shape[1] != p.h || p.V.Shape[2] != p.s ||
		fmt.Sprint(p.Y.Shape) != fmt.Sprint(p.V.Shape) {
		return fmt.Errorf("shapes Q %v K %v V %v target %v do not fit self-attention", p.Q.Shape, p.K.Shape, p.V.Shape, p.Y.Shape)
	}
	if len(p.E.Shape) != 3 || fmt.Sprint(p.E.Shape[1:]) != fmt.Sprint(p.F.Shape[1:]) {
		return fmt.Errorf("projections E %v and F %v must be [H or 1, k, N] alike", p.E.Shape, p.F.Shape)
	}
	p.he, p.k, p.n, p.hf = p.E.Shape[0], p.E.Shape[1], p.E.Shape[2], p.F.Shape[0]
	if (p.he != 1 && p.he != p.h) || (p.hf != 1 && p.hf != p.h) {
		return fmt.Errorf("projections have %d and %d heads, the layer %d", p.he, p.hf, p.h)
	}
	if p.s > p.n {
		return fmt.Errorf("calibration length %d exceeds the projections' N = %d", p.s, p.n)
	}
	if p.Scale == 0 {
		p.Scale = 1 / math.Sqrt(float64(p.d))
	}
	p.q, p.kk, p.v, p.y = f64(p.Q), f64(p.K), f64(p.V), f64(p.Y)
	p.e, p.f = f64(p.E), f64(p.F)
	if p.valid, _, err = keyMask(p.Bias, p.b, p.s); err != nil {
		return err
	}
	if p.rowNorm, err = targetRowNorms(p.y, p.valid, p.b, p.h, p.s, p.dv); err != nil {
		return err
	}
	return nil
}

// Params returns the current E and F as float32 tensors of their shapes.
func (p *linformerProblem) Params() (e, f *onnx.Tensor) {
	e = to32(p.e, p.E.Shape)
	if p.SharedEF {
		return e, e
	}
	return e, to32(p.f, p.F.Shape)
}

// LossGrad returns the relative loss over the batch rows rows (all when
// nil) and, when ge and gf are non-nil, adds its gradients with respect
// to E and F into them (for SharedEF both parts go into ge). The work is
// split statically over two goroutines, so results are deterministic.
func (p *linformerProblem) LossGrad(rows []int, ge, gf []float64) float64 {
	if rows == nil {
		rows = make([]int, p.b)
		for i := range rows {
			rows[i] = i
		}
	}
	var norm float64
	for _, bi := range rows {
		norm += p.rowNorm[bi]
	}
	if norm == 0 {
		return 0
	}
	const workers = 2
	var losses [workers]float64
	var gs [workers][2][]float64
	var wg sync.WaitGroup
	for w := range workers {
		if ge != nil {
			gs[w] = [2][]float64{make([]float64, len(ge)), make([]float64, len(gf))}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := w; job < len(rows)*p.h; job += workers {
				losses[w] += p.head(rows[job/p.h], job%p.h, norm, gs[w][0], gs[w][1])
			}
		}()
	}
	wg.Wait()
	var loss float64
	for w := range workers {
		loss += losses[w]
		if ge != nil {
			for i, x := range gs[w][0] {
				ge[i] += x
			}
			for i, x := range gs[w][1] {
				gf[i] += x
			}
		}
	}
	return loss / norm
}

// head returns the squared error of batch row bi, head hi, and adds its
// gradient (scaled by 1/norm) into ge, gf when they are non-nil.
func (p *linformerProblem) head(bi, hi int, norm float64, ge, gf []float64) float64 {
	impl := blas64.Implementation()
	k, s, d, dv, n := p.k, p.s, p.d, p.dv, p.n
	kp := make([]float64, k*d)
	vp := make([]float64, k*dv)
	z := make([]float64, s*k)
	o := make([]float64, s*dv)
	km := make([]float64, s*d)
	vm := make([]float64, s*dv)
	do := make([]float64, s*dv)
	da := make([]float64, s*k)
	dkp := make([]float64, k*d)
	dvp := make([]float64, k*dv)
	fpar := p.f
	if p.SharedEF {
		fpar = p.e
	}
	var loss float64
	bh := bi*p.h + hi
	eOff, fOff := 0, 0
	if p.he > 1 {
		eOff = hi * k * n
	}
	if p.hf > 1 {
		fOff = hi * k * n
	}
	copy(km, p.kk[bh*s*d:(bh+1)*s*d])
	copy(vm, p.v[bh*s*dv:(bh+1)*s*dv])
	for j := 0; j < s; j++ {
		if !p.valid[bi*s+j] {
			clear(km[j*d : (j+1)*d])
			clear(vm[j*dv : (j+1)*dv])
		}
	}
	q := p.q[bh*s*d : (bh+1)*s*d]
	// Forward: Kp = Es·K, Vp = Fs·V, Z = softmax(scale·Q·Kpᵀ), O = Z·Vp.
	impl.Dgemm(blas.NoTrans, blas.NoTrans, k, d, s, 1, p.e[eOff:], n, km, d, 0, kp, d)
	impl.Dgemm(blas.NoTrans, blas.NoTrans, k, dv, s, 1, fpar[fOff:], n, vm, dv, 0, vp, dv)
	impl.Dgemm(blas.NoTrans, blas.Trans, s, k, d, p.Scale, q, d, kp, d, 0, z, k)
	// A float64 row softmax, written out as in features' balance and ops'
	// reference tests: sharing one would take new exported API.
	for i := 0; i < s; i++ {
		row := z[i*k : (i+1)*k]
		mx := math.Inf(-1)
		for _, x := range row {
			mx = math.Max(mx, x)
		}
		var sum float64
		for r := range row {
			row[r] = math.Exp(row[r] - mx)
			sum += row[r]
		}
		for r := range row {
			row[r] /= sum
		}
	}
	impl.Dgemm(blas.NoTrans, blas.NoTrans, s, dv, k, 1, z, k, vp, dv, 0, o, dv)
	y := p.y[bh*s*dv : (bh+1)*s*dv]
	for i := 0; i < s; i++ {
		for c := 0; c < dv; c++ {
			idx := i*dv + c
			if !p.valid[bi*s+i] {
				do[idx] = 0
				continue
			}
			r := o[idx] - y[idx]
			loss += r * r
			do[idx] = 2 * r / norm
		}
	}
	if ge == nil {
		return loss
	}
	// Backward.
	impl.Dgemm(blas.Trans, blas.NoTrans, k, dv, s, 1, z, k, do, dv, 0, dvp, dv)
	impl.Dgemm(blas.NoTrans, blas.Trans, s, k, dv, 1, do, dv, vp, dv, 0, da, k)
	for i := 0; i < s; i++ {
		a, g := z[i*k:(i+1)*k], da[i*k:(i+1)*k]
		var dot float64
		for r := range a {
			dot += a[r] * g[r]
		}
		for r := range a {
			g[r] = a[r] * (g[r] - dot) // dZ, in place
		}
	}
	impl.Dgemm(blas.Trans, blas.NoTrans, k, d, s, p.Scale, da, k, q, d, 0, dkp, d)
	// dE[:, :s] += dKp·Kᵀ, dF[:, :s] += dVp·Vᵀ (row stride n).
	impl.Dgemm(blas.NoTrans, blas.Trans, k, s, d, 1, dkp, d, km, d, 1, ge[eOff:], n)
	gF, off := gf, fOff
	if p.SharedEF {
		gF, off = ge, eOff
	}
	impl.Dgemm(blas.NoTrans, blas.Trans, k, s, dv, 1, dvp, dv, vm, dv, 1, gF[off:], n)
	return loss
}

// fitLinformer fits problems that share one E and F (and calibration
// rows) on the sum of their losses with the shared training loop
// (fitAdamTrace). Only the columns of E and F that calibration inputs reach
// receive gradient, so Adam leaves the others unchanged.
func fitLinformer(probs []*linformerProblem, opt Options, train, held []int) adamTrace {
	p0 := probs[0]
	total := func(rows []int, ge, gf []float64) float64 {
		var l float64
		for _, p := range probs {
			l += p.LossGrad(rows, ge, gf)
		}
		return l
	}
	params := [][]float64{p0.e, p0.f}
	if p0.SharedEF {
		params[1] = nil
	}
	ge, gf := make([]float64, len(p0.e)), make([]float64, len(p0.f))
	return fitAdamTrace(opt, train, held, params, [][]float64{ge, gf},
		func(rows []int) float64 { return total(rows, nil, nil) },
		func(rows []int) { total(rows, ge, gf) })
}
