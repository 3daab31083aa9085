package finetune

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// This file holds what the fits share to read a model: running it once to
// capture values, decoding initializers and captured values (key biases,
// head layouts, masks, target norms) and storing fitted parameters back.

// runOnce runs m once on feed and returns the values names (exposed).
func runOnce(m *onnxpb.ModelProto, feed map[string]*onnx.Tensor, names []string, opt Options) (map[string]*onnx.Tensor, error) {
	s, err := infer.Open(opt.Backend, m, infer.Options{Threads: opt.Threads, Expose: names})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Run(feed, names...)
}

// captureLayer runs out once on feed for the fit of ln, exposing the
// values expose and the node's key-bias input at index biasInput (absent
// or "": none), and returns the captured values and that key bias.
func captureLayer(out *onnxpb.ModelProto, inits map[string]int, feed map[string]*onnx.Tensor, opt Options, ln targetNode, biasInput int, expose ...string) (map[string]*onnx.Tensor, *onnx.Tensor, error) {
	biasName := ""
	if len(ln.node.Input) > biasInput {
		biasName = ln.node.Input[biasInput]
	}
	got, err := runOnce(out, feed, dedup(exposeBias(expose, inits, biasName)), opt)
	if err != nil {
		return nil, nil, fmt.Errorf("finetune: converted model, layer %d: %w", ln.layer, err)
	}
	bias, err := keyBias(out, inits, got, ln.layer, biasName)
	if err != nil {
		return nil, nil, err
	}
	return got, bias, nil
}

// initializerIndex maps each initializer name of g to its position.
func initializerIndex(g *onnxpb.GraphProto) map[string]int {
	inits := map[string]int{}
	for i, t := range g.Initializer {
		inits[t.GetName()] = i
	}
	return inits
}

// floatInitializer decodes the float32 initializer name of m (inits maps
// initializer names to their index), for the fit of the given layer.
func floatInitializer(m *onnxpb.ModelProto, inits map[string]int, layer int, name string) (*onnx.Tensor, error) {
	t, err := onnx.DecodeTensor(m.Graph.Initializer[inits[name]])
	if err != nil || t.DType != onnx.Float {
		return nil, fmt.Errorf("finetune: layer %d: %q: want a float32 initializer (%v)", layer, name, err)
	}
	return t, nil
}

// keyBias returns the value of a linear op's key-bias input name: nil when
// the node has none (""), the initializer when it is one, else the value
// captured by the run (got), which exposeBias asked for.
func keyBias(m *onnxpb.ModelProto, inits map[string]int, got map[string]*onnx.Tensor, layer int, name string) (*onnx.Tensor, error) {
	if name == "" {
		return nil, nil
	}
	if _, isInit := inits[name]; isInit {
		// A half-precision model's zero bias is a float16 constant: it is
		// read as floats (keyMask reads any float type).
		t, err := onnx.DecodeTensor(m.Graph.Initializer[inits[name]])
		if err != nil || !ops.Floating(t.DType) {
			return nil, fmt.Errorf("finetune: layer %d: %q: want a float initializer (%v)", layer, name, err)
		}
		return t, nil
	}
	return got[name], nil
}

// exposeBias appends the key-bias input name to the values a run must
// expose when it is computed (not "" and not an initializer).
func exposeBias(expose []string, inits map[string]int, name string) []string {
	if _, isInit := inits[name]; name != "" && !isInit {
		return append(expose, name)
	}
	return expose
}

func dedup(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// headsLayout returns y as [B,H,S,Dv]: as it is, or split from the
// head-merged [B,S,H·Dv] layout of fused attention outputs.
func headsLayout(y *onnx.Tensor, b, h, s, dv int) (*onnx.Tensor, error) {
	want := []int{b, h, s, dv}
	if fmt.Sprint(y.Shape) == fmt.Sprint(want) {
		return y, nil
	}
	if len(y.Shape) != 3 || y.Shape[0] != b || y.Shape[1] != s || y.Shape[2] != h*dv || y.DType != onnx.Float {
		return nil, fmt.Errorf("target attention output %v, want %v or [%d,%d,%d]", y.Shape, want, b, s, h*dv)
	}
	src := y.Floats()
	out := make([]float32, len(src))
	for bi := 0; bi < b; bi++ {
		for i := 0; i < s; i++ {
			for hi := 0; hi < h; hi++ {
				copy(out[((bi*h+hi)*s+i)*dv:][:dv], src[(bi*s+i)*h*dv+hi*dv:][:dv])
			}
		}
	}
	return onnx.NewFloat(want, out), nil
}

// keyMask reads the additive key bias ([B or 1,1,1,S or 1], or nil: no
// masking) as per-key values and validity over [B*S]: a key is padding
// when its bias is ≤ −1e4, NaN or −Inf.
func keyMask(bias *onnx.Tensor, b, s int) (valid []bool, values []float64, err error) {
	values = make([]float64, b*s)
	valid = make([]bool, b*s)
	for i := range valid {
		valid[i] = true
	}
	if bias == nil {
		return valid, values, nil
	}
	bs := bias.Shape
	if len(bs) != 4 || (bs[0] != 1 && bs[0] != b) || bs[1] != 1 || bs[2] != 1 || (bs[3] != 1 && bs[3] != s) {
		return nil, nil, fmt.Errorf("key bias shape %v, want [B or 1,1,1,S or 1]", bs)
	}
	bv, err := bias.AsFloat64s()
	if err != nil {
		return nil, nil, err
	}
	for bi := 0; bi < b; bi++ {
		for j := 0; j < s; j++ {
			x := bv[min(bi, bs[0]-1)*bs[3]+min(j, bs[3]-1)]
			valid[bi*s+j] = !(x <= -1e4 || math.IsNaN(x) || math.IsInf(x, -1))
			values[bi*s+j] = x
		}
	}
	return valid, values, nil
}

// targetRowNorms returns Σ‖Y‖² over the valid query rows of each batch row
// of the [B,H,S,Dv] target y, and an error when the target is zero.
func targetRowNorms(y []float64, valid []bool, b, h, s, dv int) ([]float64, error) {
	rowNorm := make([]float64, b)
	var total float64
	for bi := 0; bi < b; bi++ {
		for hi := 0; hi < h; hi++ {
			for i := 0; i < s; i++ {
				if !valid[bi*s+i] {
					continue
				}
				for _, x := range y[((bi*h+hi)*s+i)*dv:][:dv] {
					rowNorm[bi] += x * x
				}
			}
		}
		total += rowNorm[bi]
	}
	if total == 0 {
		return nil, fmt.Errorf("the target attention output is zero")
	}
	return rowNorm, nil
}

func f64(t *onnx.Tensor) []float64 {
	x := t.Floats()
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// to32 converts a float64 parameter back to a float32 tensor of shape.
func to32(x []float64, shape []int) *onnx.Tensor {
	d := make([]float32, len(x))
	for i, v := range x {
		d[i] = float32(v)
	}
	return onnx.NewFloat(append([]int(nil), shape...), d)
}

// namedParam is a fitted parameter and the initializer it replaces ("" or
// a nil tensor: nothing to store).
type namedParam struct {
	name string
	t    *onnx.Tensor
}

// storeParams writes fitted parameters of one layer back into m.
func storeParams(m *onnxpb.ModelProto, inits map[string]int, layer int, params []namedParam) error {
	for _, p := range params {
		if p.name == "" || p.t == nil {
			continue
		}
		tp, err := onnx.EncodeTensor(p.name, p.t)
		if err != nil {
			return fmt.Errorf("finetune: layer %d: %w", layer, err)
		}
		m.Graph.Initializer[inits[p.name]] = tp
	}
	return nil
}
