package finetune

import (
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// MomentOptions configures PerformerMoments.
type MomentOptions struct {
	// NoCenter selects uncentred statistics. The centring must be the
	// conversion's (convert.PerformerOptions.Centered): the zero values
	// of both are centred, NoCenter goes with Center convert.CenterOff.
	NoCenter bool
	// Weighting of the query–key pairs: features.WeightAttention (the
	// original model's attention weights; default) or
	// features.WeightUniform.
	Weighting string
	// Rows is the number of calibration rows per model run (default 8).
	Rows int
	// Backend runs the model: "ort" or "native" (infer.DefaultBackend when
	// empty).
	Backend string
	// Threads bounds the goroutines (heads accumulated in parallel) and
	// the backend's threads.
	Threads int
	// Progress, when set, gets one line per model run (Rows rows): the
	// rows measured, the time elapsed and an estimate of the time left.
	// nil is silent.
	Progress io.Writer
}

// PerformerMoments runs the original model on the calibration inputs feed
// (every tensor with the batch on its first axis) and returns, per
// attention block that convert.ToPerformer would convert (keyed by its
// Detect layer index), the second moments of the block's scaled queries
// and keys over each row's valid tokens, for
// convert.PerformerOptions.Moments.
//
// The activations are the original model's: the model is converted with
// plain options and its PerformerAttention function replaced by exact
// softmax attention (ops.PerformerExactFunction), so each node's Q, K and
// key_bias inputs are the original Q, K and mask in the op's [B,H,S,D]
// layout, whatever the exporter's layout was.
func PerformerMoments(original *onnxpb.ModelProto, feed map[string]*onnx.Tensor, o MomentOptions) (map[int]*features.Moments, error) {
	if o.Weighting == "" {
		o.Weighting = features.WeightAttention
	}
	if o.Rows == 0 {
		o.Rows = 8
	}
	if o.Backend == "" {
		o.Backend = infer.DefaultBackend
	}
	if o.Threads <= 0 {
		o.Threads = runtime.GOMAXPROCS(0)
	}
	if o.Rows < 1 {
		return nil, fmt.Errorf("finetune: moments: rows per run %d must be positive", o.Rows)
	}
	twin, rep, err := convert.ToPerformer(original, convert.PerformerOptions{Features: 1, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
	if err != nil {
		return nil, fmt.Errorf("finetune: moments: %w", err)
	}
	if len(rep.Converted) == 0 {
		return nil, fmt.Errorf("finetune: moments: the model has no convertible attention block")
	}
	if err := exactTwin(twin); err != nil {
		return nil, err
	}
	byName := map[string]*onnxpb.NodeProto{}
	for _, n := range twin.Graph.Node {
		byName[n.GetName()] = n
	}
	inits := initializerIndex(twin.Graph)
	type layerNode struct {
		layer       int
		q, k, bias  string
		biasInit    *onnx.Tensor
		scale       float64
		heads, dims int
	}
	var layers []layerNode
	var expose []string
	out := map[int]*features.Moments{}
	for _, br := range rep.Converted {
		if br.Window != nil {
			continue // a sliding-window block: WindowAttention, exact, no features
		}
		n := byName[br.Node]
		if n == nil || len(n.Input) < 5 {
			return nil, fmt.Errorf("finetune: moments: converted node %q not found", br.Node)
		}
		ln := layerNode{layer: br.Layer, q: n.Input[0], k: n.Input[1], bias: n.Input[4], scale: float64(onnx.AttrFloat(n, "scale", 0)), heads: br.Heads, dims: br.HeadDim}
		if !(ln.scale > 0) {
			return nil, fmt.Errorf("finetune: moments: layer %d: scale %g", br.Layer, ln.scale)
		}
		if i, ok := inits[ln.bias]; ok {
			if ln.biasInit, err = onnx.DecodeTensor(twin.Graph.Initializer[i]); err != nil {
				return nil, fmt.Errorf("finetune: moments: layer %d: key bias: %w", br.Layer, err)
			}
		} else {
			expose = append(expose, ln.bias)
		}
		expose = append(expose, ln.q, ln.k)
		if out[br.Layer], err = features.NewMoments(br.Heads, br.HeadDim, !o.NoCenter, o.Weighting); err != nil {
			return nil, fmt.Errorf("finetune: moments: %w", err)
		}
		layers = append(layers, ln)
	}
	if len(layers) == 0 {
		return out, nil // sliding-window blocks alone: nothing to balance
	}
	expose = dedup(expose)
	rows := -1
	for name, t := range feed {
		if len(t.Shape) == 0 {
			continue // carries no tokens (a task id): fed with every batch
		}
		if rows >= 0 && t.Shape[0] != rows {
			return nil, fmt.Errorf("finetune: moments: input %q has shape %v; every input of tokens needs the same batch axis first", name, t.Shape)
		}
		rows = t.Shape[0]
	}
	if rows < 1 {
		return nil, fmt.Errorf("finetune: moments: no calibration inputs")
	}
	sess, err := openExact(twin, expose, o)
	if err != nil {
		return nil, fmt.Errorf("finetune: moments: %w", err)
	}
	defer sess.Close()
	prog := progress.New(o.Progress, "moments: run", (rows+o.Rows-1)/o.Rows)
	for start := 0; start < rows; start += o.Rows {
		end := min(start+o.Rows, rows)
		part := map[string]*onnx.Tensor{}
		for name, t := range feed {
			if part[name], err = sliceRows(t, start, end); err != nil {
				return nil, fmt.Errorf("finetune: moments: input %q: %w", name, err)
			}
		}
		got, err := sess.Run(part, expose...)
		if err != nil {
			return nil, fmt.Errorf("finetune: moments: rows %d–%d: %w", start, end-1, err)
		}
		for _, ln := range layers {
			bias := ln.biasInit
			if bias == nil {
				bias = got[ln.bias]
			}
			if err := addMoments(out[ln.layer], got[ln.q], got[ln.k], bias, ln.scale, o.Threads); err != nil {
				return nil, fmt.Errorf("finetune: moments: layer %d: %w", ln.layer, err)
			}
		}
		prog.Step("calibration rows %d–%d of %d measured", start+1, end, rows)
	}
	return out, nil
}

// exactTwin replaces m's PerformerAttention function by exact attention at
// the same opset.
func exactTwin(m *onnxpb.ModelProto) error {
	for i, f := range m.Functions {
		if f.GetDomain() != ops.Domain || f.GetName() != ops.PerformerOp {
			continue
		}
		var opset int64
		for _, imp := range f.OpsetImport {
			if imp.GetDomain() == "" || imp.GetDomain() == "ai.onnx" {
				opset = imp.GetVersion()
			}
		}
		fn, err := ops.PerformerExactFunction(opset)
		if err != nil {
			return fmt.Errorf("finetune: moments: %w", err)
		}
		// A float16 or bfloat16 model's body widens its inputs first
		// (ops.TypedFunction): the exact body must too.
		if fn, err = ops.TypedFunction(fn, ops.FunctionType(f)); err != nil {
			return fmt.Errorf("finetune: moments: %w", err)
		}
		m.Functions[i] = fn
		return nil
	}
	return fmt.Errorf("finetune: moments: the converted model has no %s function", ops.PerformerOp)
}

// openExact opens the exact twin: onnxruntime runs the (replaced) function
// body; the native backend must be told to expand it rather than use the
// registered Performer kernel.
func openExact(m *onnxpb.ModelProto, expose []string, o MomentOptions) (infer.Session, error) {
	opts := infer.Options{Threads: o.Threads, Expose: expose}
	if o.Backend == "native" {
		return infer.NewNativeSessionWith(m, infer.NativeOptions{Options: opts, InlineFunctions: true})
	}
	return infer.Open(o.Backend, m, opts)
}

// sliceRows returns rows [a, b) of t's first axis; a scalar (an input
// that carries no tokens, as a task id) is every batch's, returned as it
// is.
func sliceRows(t *onnx.Tensor, a, b int) (*onnx.Tensor, error) {
	if len(t.Shape) == 0 || a == 0 && b == t.Shape[0] {
		return t, nil
	}
	per := t.Len() / t.Shape[0]
	shape := append([]int{b - a}, t.Shape[1:]...)
	var data any
	switch d := t.Data.(type) {
	case []int64:
		data = append([]int64(nil), d[a*per:b*per]...)
	case []int32:
		data = append([]int32(nil), d[a*per:b*per]...)
	case []float32:
		data = append([]float32(nil), d[a*per:b*per]...)
	case []bool:
		data = append([]bool(nil), d[a*per:b*per]...)
	default:
		return nil, fmt.Errorf("cannot split a %s input into batches", onnx.TypeName(t.DType))
	}
	return &onnx.Tensor{DType: t.DType, Shape: shape, Data: data}, nil
}

// addMoments adds every row of one layer's Q, K [B,H,S,D] (valid tokens
// only, from bias [B or 1,1,1,S or 1]) to mo, heads in parallel.
func addMoments(mo *features.Moments, q, k, bias *onnx.Tensor, scale float64, threads int) error {
	if q == nil || k == nil || bias == nil || len(q.Shape) != 4 || len(k.Shape) != 4 || len(bias.Shape) != 4 {
		return fmt.Errorf("missing or malformed Q, K or key bias")
	}
	b, h, s, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	if k.Shape[0] != b || k.Shape[1] != h || k.Shape[2] != s || k.Shape[3] != d {
		return fmt.Errorf("queries Q %v and keys K %v differ (calibration needs self-attention)", q.Shape, k.Shape)
	}
	if h != mo.Heads || d != mo.Dim {
		return fmt.Errorf("queries Q %v, but the block has %d heads × %d", q.Shape, mo.Heads, mo.Dim)
	}
	bb, bs := bias.Shape[0], bias.Shape[3]
	if (bb != 1 && bb != b) || (bs != 1 && bs != s) {
		return fmt.Errorf("key bias %v for Q %v", bias.Shape, q.Shape)
	}
	// AsFloat64s widens a float16 or bfloat16 model's values exactly.
	qd, err := q.AsFloat64s()
	if err != nil {
		return fmt.Errorf("queries: %w", err)
	}
	kd, err := k.AsFloat64s()
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	bd, err := bias.AsFloat64s()
	if err != nil {
		return fmt.Errorf("key bias: %w", err)
	}
	if len(qd) != b*h*s*d || len(kd) != len(qd) || len(bd) != bb*bs {
		return fmt.Errorf("queries Q %v, keys K %v or key bias %v hold too few values", q.Shape, k.Shape, bias.Shape)
	}
	var firstErr error
	var mu sync.Mutex
	for bi := 0; bi < b; bi++ {
		var idx []int
		var bv []float64
		for j := 0; j < s; j++ {
			v := bd[min(bi, bb-1)*bs+min(j, bs-1)]
			if v > -1e4 {
				idx = append(idx, j)
				bv = append(bv, v)
			}
		}
		n := len(idx)
		if n == 0 {
			continue
		}
		jobs := make(chan int, h)
		for hi := 0; hi < h; hi++ {
			jobs <- hi
		}
		close(jobs)
		var wg sync.WaitGroup
		for range max(1, min(threads, h)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for hi := range jobs {
					qs, ks := make([]float64, n*d), make([]float64, n*d)
					base := (bi*h + hi) * s * d
					for r, j := range idx {
						for c := 0; c < d; c++ {
							qs[r*d+c] = qd[base+j*d+c]
							ks[r*d+c] = kd[base+j*d+c]
						}
					}
					// Heads write disjoint parts of mo.
					if err := mo.AddSequence(hi, qs, ks, n, bv, scale); err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
	}
	return firstErr
}
