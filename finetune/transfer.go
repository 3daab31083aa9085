package finetune

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// Transfer trains the feature maps of every HedgehogAttention node of
// converted by attention transfer on the calibration rows cal, and
// returns the trained copy. The teacher is converted itself with every
// HedgehogAttention node made exact (one block holding the whole
// sequence: softmax attention, the original model's), run once per layer
// to capture the node's inputs and exact output; each head's maps then
// minimise the relative squared error of its attention output,
// Σ‖out − y‖²/Σ‖y‖², over the training rows, and keep the parameters of
// the lowest error on the held-out rows (see TransferOptions). Heads are
// independent and trained in parallel.
func Transfer(converted *onnxpb.ModelProto, cal *Calibration, o TransferOptions) (*onnxpb.ModelProto, *TransferReport, error) {
	start := time.Now()
	if err := o.defaults(); err != nil {
		return nil, nil, err
	}
	if cal == nil || cal.Rows == 0 {
		return nil, nil, fmt.Errorf("finetune: no calibration rows")
	}
	if converted.GetGraph() == nil {
		return nil, nil, fmt.Errorf("finetune: converted model has no graph")
	}
	if o.TeacherBatch == 0 {
		o.TeacherBatch = max(1, 8*512*512/(cal.SeqLen*cal.SeqLen))
	}
	held, train, heldRows, err := transferRows(cal, o.HeldOut)
	if err != nil {
		return nil, nil, err
	}
	out := onnx.CloneShared(converted)
	nodes, attrs, err := hedgehogNodes(out)
	if err != nil {
		return nil, nil, err
	}
	teacher, err := exactTeacher(out, cal.SeqLen)
	if err != nil {
		return nil, nil, err
	}
	rep := &TransferReport{Objective: o.Objective, Rows: cal.Rows, HeldRows: len(heldRows), SeqLen: cal.SeqLen, Steps: o.Steps, LR: o.LR, Windows: o.Windows}
	rep.Tokens, rep.HeldTokens = countTokens(cal, held)
	if rep.Layers, err = transferLayers(teacher, out, cal, nodes, attrs, o, train, heldRows); err != nil {
		return nil, nil, err
	}
	if len(heldRows) > 0 && o.Steps > 0 {
		// Each head was kept at its best held-out attention error, but
		// on inputs from the exact teacher; the model as a whole, each
		// layer reading the trained ones before it, is judged here, on
		// the held-out rows' output against the exact model: a trained
		// model that is not better than the one given is not returned.
		chk, err := checkHeldOut(teacher, converted, out, cal.Feed, cal.Rows, heldRows, Options{Backend: o.Backend, Threads: o.Threads})
		if err != nil {
			return nil, nil, err
		}
		rep.HeldOut = chk
		if !chk.Better() {
			rep.KeptInput = true
			out = onnx.CloneShared(converted)
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	return out, rep, nil
}

// transferRows returns the held-out marks of the calibration rows (marks
// given, else every fourth document held out) and the rows to train on
// and held out.
func transferRows(cal *Calibration, marks []bool) (held []bool, train, heldRows []int, err error) {
	held = marks
	if held == nil {
		held = cal.HoldOut(0.25)
	}
	if held != nil && len(held) != cal.Rows {
		return nil, nil, nil, fmt.Errorf("finetune: %d held-out marks for %d calibration rows", len(held), cal.Rows)
	}
	for r := 0; r < cal.Rows; r++ {
		if held != nil && held[r] {
			heldRows = append(heldRows, r)
		} else {
			train = append(train, r)
		}
	}
	if len(train) == 0 {
		return nil, nil, nil, fmt.Errorf("finetune: every calibration row is held out")
	}
	return held, train, heldRows, nil
}

// hedgehogNodes returns the HedgehogAttention nodes of m, each checked to
// be one Transfer trains, and their attributes.
func hedgehogNodes(m *onnxpb.ModelProto) ([]*onnxpb.NodeProto, []ops.HedgehogAttrs, error) {
	var nodes []*onnxpb.NodeProto
	var attrs []ops.HedgehogAttrs
	for _, n := range m.Graph.Node {
		if n.GetDomain() != ops.Domain || n.GetOpType() != ops.HedgehogOp {
			continue
		}
		if len(n.Input) != 10 || len(n.Output) != 1 {
			return nil, nil, fmt.Errorf("finetune: node %s: %d inputs, want 10 (Q, K, V, key_bias and the maps' six parameters)", n.GetName(), len(n.Input))
		}
		a, err := ops.ParseHedgehogAttrs(n)
		if err != nil {
			return nil, nil, fmt.Errorf("finetune: node %s: %w", n.GetName(), err)
		}
		if a.Causal {
			return nil, nil, fmt.Errorf("finetune: node %s: causal %s is not trained yet", n.GetName(), ops.HedgehogOp)
		}
		nodes, attrs = append(nodes, n), append(attrs, a)
	}
	if len(nodes) == 0 {
		return nil, nil, fmt.Errorf("finetune: the converted model has no %s nodes (convert it with ToHedgehog first)", ops.HedgehogOp)
	}
	return nodes, attrs, nil
}

// captureGroup is the number of layers captured together within the
// capture budget: one teacher pass for each group (a pass costs a full
// forward of every row).
func captureGroup(m *onnxpb.ModelProto, cal *Calibration, nodes []*onnxpb.NodeProto, budget int64) (int, error) {
	per := int64(cal.Rows) * int64(cal.SeqLen) * layerRowBytes(m, nodes[0])
	if per > budget {
		fit := budget / max(1, per/int64(cal.Rows))
		return 0, fmt.Errorf("finetune: %d calibration rows of %d tokens need %d MiB per layer, more than the %d MiB capture budget; use at most %d rows (--max-windows)",
			cal.Rows, cal.SeqLen, per>>20, budget>>20, fit)
	}
	if per == 0 {
		return len(nodes), nil
	}
	return int(max(1, min(int64(len(nodes)), budget/per))), nil
}

// transferLayers captures the layers' inputs from the teacher, group by
// group, trains each layer's heads and stores them in out, and returns
// the layers' reports (held-out errors NaN without held-out rows).
func transferLayers(teacher, out *onnxpb.ModelProto, cal *Calibration, nodes []*onnxpb.NodeProto, attrs []ops.HedgehogAttrs, o TransferOptions, train, heldRows []int) ([]TransferLayer, error) {
	group, err := captureGroup(out, cal, nodes, o.MaxCapture)
	if err != nil {
		return nil, err
	}
	inits := initializerIndex(out.Graph)
	prog := progress.New(o.Progress, "transfer: layer", len(nodes))
	var reports []TransferLayer
	for g0 := 0; g0 < len(nodes); g0 += group {
		g1 := min(len(nodes), g0+group)
		layers, err := captureLayers(teacher, cal, nodes[g0:g1], attrs[g0:g1], inits, out, o)
		if err != nil {
			return nil, err
		}
		for gi, heads := range layers {
			li, n := g0+gi, nodes[g0+gi]
			l := trainLayer(heads, li, n, o, train, heldRows)
			if len(heldRows) == 0 {
				l.HeldBefore, l.HeldAfter = math.NaN(), math.NaN()
			}
			reports = append(reports, l)
			prog.Step("%s (%s): rel err train %.4f → %.4f, held-out %.4f → %.4f", ops.HedgehogOp, n.GetName(), l.TrainBefore, l.TrainAfter, l.HeldBefore, l.HeldAfter)
			if err := storeHeads(out, inits, n, heads); err != nil {
				return nil, err
			}
			layers[gi] = nil // free the captured values
		}
	}
	return reports, nil
}

// trainLayer trains the heads of one layer in parallel (Threads at once)
// and sums their errors into the layer's report.
func trainLayer(heads []*hhHead, li int, n *onnxpb.NodeProto, o TransferOptions, train, held []int) TransferLayer {
	fits := make([]hhFit, len(heads))
	workers := o.Threads
	if workers <= 0 {
		workers = 2
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < min(workers, len(heads)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for hi := range next {
				rng := rand.New(rand.NewPCG(o.Seed, uint64(li)<<32|uint64(hi)))
				if o.Objective == ObjectiveWeights {
					heads[hi].ceQueries = o.Queries
				}
				heads[hi].prepare()
				fits[hi] = heads[hi].fit(o, train, held, rng)
			}
		}()
	}
	for hi := range heads {
		next <- hi
	}
	close(next)
	wg.Wait()
	l := TransferLayer{Layer: li, Node: n.GetName()}
	var sums [4][2]float64
	for _, f := range fits {
		for k, x := range [][2]float64{f.trainBefore, f.trainAfter, f.heldBefore, f.heldAfter} {
			sums[k][0] += x[0]
			sums[k][1] += x[1]
		}
		l.Steps += float64(f.steps) / float64(len(fits))
	}
	rel := func(x [2]float64) float64 { return math.Sqrt(x[0] / math.Max(x[1], 1e-300)) }
	l.TrainBefore, l.TrainAfter, l.HeldBefore, l.HeldAfter = rel(sums[0]), rel(sums[1]), rel(sums[2]), rel(sums[3])
	return l
}

// layerRowBytes estimates the bytes one token of one calibration row
// costs a captured layer: Q, K, V and the exact output, the near part,
// and the copies the run returns, from the node's map weight [H,D,F].
func layerRowBytes(m *onnxpb.ModelProto, n *onnxpb.NodeProto) int64 {
	for _, t := range m.Graph.Initializer {
		if t.GetName() == n.Input[4] && len(t.Dims) == 3 {
			hd := t.Dims[0] * t.Dims[1]
			return 4 * (2*hd + 3*hd) * 2
		}
	}
	return 0
}

func countTokens(cal *Calibration, held []bool) (all, heldOut int) {
	mask := maskOf(cal)
	for r := 0; r < cal.Rows; r++ {
		for i := 0; i < cal.SeqLen; i++ {
			if mask == nil || mask[r*cal.SeqLen+i] != 0 {
				all++
				if held != nil && held[r] {
					heldOut++
				}
			}
		}
	}
	return all, heldOut
}

// maskOf returns the calibration's attention mask (nil if it has none).
func maskOf(cal *Calibration) []int64 {
	for name, t := range cal.Feed {
		if infer.InputRole(name) == infer.RoleMask {
			if x, err := t.AsFloat64s(); err == nil {
				m := make([]int64, len(x))
				for i, v := range x {
					m[i] = int64(v)
				}
				return m
			}
		}
	}
	return nil
}

// exactTeacher returns a copy of m whose HedgehogAttention nodes attend
// exactly to every key: each becomes a LocalPooledAttention node over the
// same Q, K, V and key bias with one block of seqLen positions and no
// pooled part, which is softmax attention (the original model's). The
// teacher's function is built as HedgehogAttention's is in m: at the
// same default-domain opset and for the same element type (a float16 or
// bfloat16 model's attention widens its inputs and computes in float32,
// ops.TypedFunction).
func exactTeacher(m *onnxpb.ModelProto, seqLen int) (*onnxpb.ModelProto, error) {
	t := onnx.CloneShared(m)
	exact := ops.LocalPooledAttrs{Block: seqLen, Reach: ops.NoReach}
	for i, n := range t.Graph.Node {
		if n.GetDomain() != ops.Domain || n.GetOpType() != ops.HedgehogOp {
			continue
		}
		if len(n.Input) < 4 || len(n.Output) != 1 {
			return nil, fmt.Errorf("finetune: node %s: want Q, K, V and key_bias inputs and one output", n.GetName())
		}
		a := exact
		a.Scale = onnx.AttrFloat(n, "scale", 0)
		t.Graph.Node[i] = ops.NewLocalPooledNode(n.GetName(), n.Input[:4], n.Output[0], a)
	}
	var fns []*onnxpb.FunctionProto
	opset, dt := onnx.OpsetVersion(t, ""), onnx.Float
	for _, f := range t.Functions {
		if f.GetDomain() == ops.Domain && f.GetName() == ops.HedgehogOp {
			dt = ops.FunctionType(f)
			for _, o := range f.OpsetImport {
				if o.GetDomain() == "" {
					opset = o.GetVersion()
				}
			}
		}
		if f.GetDomain() == ops.Domain && (f.GetName() == ops.HedgehogOp || f.GetName() == ops.LocalPooledOp) {
			continue
		}
		fns = append(fns, f)
	}
	fn, err := ops.LocalPooledFunction(opset, exact)
	if err == nil {
		fn, err = ops.TypedFunction(fn, dt)
	}
	if err != nil {
		return nil, fmt.Errorf("finetune: teacher: %w", err)
	}
	t.Functions = append(fns, fn)
	return t, nil
}

// wideFloat returns t as float32: float16 and bfloat16 values widened (a
// half-precision model's captured values), float32 as it is.
func wideFloat(t *onnx.Tensor) (*onnx.Tensor, error) {
	if t == nil || t.DType == onnx.Float {
		return t, nil
	}
	if t.DType != onnx.Float16 && t.DType != onnx.BFloat16 {
		return nil, fmt.Errorf("value of type %s, want float32, float16 or bfloat16", onnx.TypeName(t.DType))
	}
	x, err := t.AsFloat32s()
	if err != nil {
		return nil, err
	}
	return onnx.NewFloat(t.Shape, x), nil
}

// captureLayers runs the teacher over the calibration rows, TeacherBatch
// rows at a time, and returns for each node one problem per head with the
// node's inputs, the exact output and the node's current parameters (read
// from out).
func captureLayers(teacher *onnxpb.ModelProto, cal *Calibration, nodes []*onnxpb.NodeProto, attrs []ops.HedgehogAttrs, inits map[string]int, out *onnxpb.ModelProto, o TransferOptions) ([][]*hhHead, error) {
	var names []string
	for _, n := range nodes {
		names = append(names, n.Input[0], n.Input[1], n.Input[2], n.Output[0])
		if _, isInit := inits[n.Input[3]]; n.Input[3] != "" && !isInit {
			names = append(names, n.Input[3])
		}
	}
	names = dedup(names)
	sess, err := infer.Open(o.Backend, teacher, infer.Options{Threads: o.Threads, Expose: names})
	if err != nil {
		return nil, fmt.Errorf("finetune: teacher: %w", err)
	}
	defer sess.Close()
	layers := make([][]*hhHead, len(nodes))
	for at := 0; at < cal.Rows; at += o.TeacherBatch {
		end := min(cal.Rows, at+o.TeacherBatch)
		feed := map[string]*onnx.Tensor{}
		for name, t := range cal.Feed {
			if feed[name], err = sliceRows(t, at, end); err != nil {
				return nil, err
			}
		}
		got, err := sess.Run(feed, names...)
		if err != nil {
			return nil, fmt.Errorf("finetune: teacher: %w", err)
		}
		for i, n := range nodes {
			var bias *onnx.Tensor
			if n.Input[3] != "" {
				if bias, err = keyBias(out, inits, got, -1, n.Input[3]); err != nil {
					return nil, err
				}
			}
			// A half-precision model's values are widened here once: the
			// heads train in float32 (and float64) whatever the model's
			// precision.
			for _, name := range []string{n.Input[0], n.Input[1], n.Input[2], n.Output[0]} {
				if got[name], err = wideFloat(got[name]); err != nil {
					return nil, fmt.Errorf("finetune: node %s: %s: %w", n.GetName(), name, err)
				}
			}
			if layers[i] == nil {
				if layers[i], err = newHeads(got[n.Input[0]], got[n.Input[2]], cal.Rows, attrs[i], out, inits, n); err != nil {
					return nil, fmt.Errorf("finetune: node %s: %w", n.GetName(), err)
				}
			}
			if err := fillHeads(layers[i], at, got[n.Input[0]], got[n.Input[1]], got[n.Input[2]], got[n.Output[0]], bias); err != nil {
				return nil, fmt.Errorf("finetune: node %s: %w", n.GetName(), err)
			}
		}
	}
	return layers, nil
}

// newHeads allocates the problems of every head of a layer whose Q is
// [B,H,S,D] and V [B,H,S,Dv], for rows calibration rows, with the node's
// current parameters.
func newHeads(q, v *onnx.Tensor, rows int, a ops.HedgehogAttrs, out *onnxpb.ModelProto, inits map[string]int, n *onnxpb.NodeProto) ([]*hhHead, error) {
	if q == nil || v == nil || len(q.Shape) != 4 || len(v.Shape) != 4 {
		return nil, fmt.Errorf("queries and values must be captured as [B,H,S,D]")
	}
	h, s, d, dv := q.Shape[1], q.Shape[2], q.Shape[3], v.Shape[3]
	var p [6][]float32
	for i := range p {
		t, err := floatInitializer(out, inits, -1, n.Input[4+i])
		if err != nil {
			return nil, err
		}
		p[i] = t.Floats()
	}
	f := len(p[0]) / max(1, h*d)
	if f == 0 || len(p[0]) != h*d*f || len(p[1]) != h*2*f || len(p[2]) != h || len(p[3]) != h*d*f || len(p[4]) != h*2*f || len(p[5]) != h {
		return nil, fmt.Errorf("map parameters do not fit %d heads of size %d", h, d)
	}
	scale := float64(a.Scale)
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(d))
	}
	f64 := func(x []float32) []float64 {
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = float64(v)
		}
		return out
	}
	heads := make([]*hhHead, h)
	for hi := range heads {
		heads[hi] = &hhHead{n: rows, s: s, d: d, dv: dv, f: f, scale: scale, block: a.Block, reach: a.Reach,
			q: make([]float32, rows*s*d), k: make([]float32, rows*s*d), v: make([]float32, rows*s*dv), y: make([]float32, rows*s*dv),
			beta: make([]float64, rows*s), valid: make([]bool, rows*s),
			wq: f64(p[0][hi*d*f : (hi+1)*d*f]), bq: f64(p[1][hi*2*f : (hi+1)*2*f]), gq: []float64{float64(p[2][hi])},
			wk: f64(p[3][hi*d*f : (hi+1)*d*f]), bk: f64(p[4][hi*2*f : (hi+1)*2*f]), gk: []float64{float64(p[5][hi])},
		}
	}
	return heads, nil
}

// fillHeads copies one teacher batch (rows at.. of the calibration) into
// the heads' problems.
func fillHeads(heads []*hhHead, at int, q, k, v, y, bias *onnx.Tensor) error {
	h0 := heads[0]
	b := q.Shape[0]
	want := []int{b, len(heads), h0.s, h0.d}
	if fmt.Sprint(q.Shape) != fmt.Sprint(want) || k == nil || fmt.Sprint(k.Shape) != fmt.Sprint(want) {
		return fmt.Errorf("queries %v and keys %v, want %v", q.Shape, shapeOf(k), want)
	}
	if v == nil || fmt.Sprint(v.Shape) != fmt.Sprint([]int{b, len(heads), h0.s, h0.dv}) {
		return fmt.Errorf("values %v, want [%d,%d,%d,%d]", shapeOf(v), b, len(heads), h0.s, h0.dv)
	}
	y, err := headsLayout(y, b, len(heads), h0.s, h0.dv)
	if err != nil {
		return err
	}
	valid, beta, err := keyMask(bias, b, h0.s)
	if err != nil {
		return err
	}
	qf, kf, vf, yf := q.Floats(), k.Floats(), v.Floats(), y.Floats()
	s, d, dv := h0.s, h0.d, h0.dv
	for hi, hh := range heads {
		for bi := 0; bi < b; bi++ {
			r := at + bi
			src := (bi*len(heads) + hi) * s
			copy(hh.q[r*s*d:(r+1)*s*d], qf[src*d:(src+s)*d])
			copy(hh.k[r*s*d:(r+1)*s*d], kf[src*d:(src+s)*d])
			copy(hh.v[r*s*dv:(r+1)*s*dv], vf[src*dv:(src+s)*dv])
			copy(hh.y[r*s*dv:(r+1)*s*dv], yf[src*dv:(src+s)*dv])
			copy(hh.beta[r*s:(r+1)*s], beta[bi*s:(bi+1)*s])
			copy(hh.valid[r*s:(r+1)*s], valid[bi*s:(bi+1)*s])
		}
	}
	return nil
}

func shapeOf(t *onnx.Tensor) []int {
	if t == nil {
		return nil
	}
	return t.Shape
}

// storeHeads writes the heads' trained maps into n's parameter
// initializers in out.
func storeHeads(out *onnxpb.ModelProto, inits map[string]int, n *onnxpb.NodeProto, heads []*hhHead) error {
	h, d, f := len(heads), heads[0].d, heads[0].f
	get := []func(*hhHead) []float64{
		func(x *hhHead) []float64 { return x.wq }, func(x *hhHead) []float64 { return x.bq }, func(x *hhHead) []float64 { return x.gq },
		func(x *hhHead) []float64 { return x.wk }, func(x *hhHead) []float64 { return x.bk }, func(x *hhHead) []float64 { return x.gk },
	}
	shapes := [][]int{{h, d, f}, {h, 2 * f}, {h}, {h, d, f}, {h, 2 * f}, {h}}
	var params []namedParam
	for i, g := range get {
		var all []float64
		for _, hh := range heads {
			all = append(all, g(hh)...)
		}
		params = append(params, namedParam{n.Input[4+i], to32(all, shapes[i])})
	}
	return storeParams(out, inits, -1, params)
}
