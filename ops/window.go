package ops

import (
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// WindowAttention (domain ai.linearize, version 1) is exact sliding-window
// attention: query i attends to the valid keys j with
// −window_left ≤ j − i ≤ window_right,
//
//	out_i = Σ_j softmax_j(scale·q_i·k_j)·v_j over those keys,
//
// which is what dense attention computes under an additive band mask
// (ModernBERT's local layers: ±64; a causal window: window_right 0), at a
// cost and memory linear in S. Inputs: Q [B,H,S,D], K [B,H,S,D],
// V [B,H,S,Dv] (self-attention), key_bias [B or 1,1,1,S or 1] (keys at or
// below −1e4 are padding; its value is otherwise not applied, as for
// LocalPooledAttention). Output [B,H,S,Dv]; a query without a valid key
// in its band gives zeros.
//
// With alibi (ALiBi slopes m_h, one per head: jina-embeddings-v2, MPT,
// BLOOM) every score of head h is lowered by m_h·|i − j|, i and j the
// positions (padding included),
//
//	out_i = Σ_j softmax_j(scale·q_i·k_j − m_h·|i − j|)·v_j over the band,
//
// exactly the dense ALiBi attention restricted to the band (a band with
// L, R ≥ S − 1 is global ALiBi attention).
//
// It is LocalPooledAttention's band mode (blocks of b = max(L, R, 1),
// reach 1, no segments, no sinks) under a name of its own, so that a
// model can hold it beside a LocalPooledAttention (or any other op) of
// other attributes: each op type has one function body in a model.
const windowDoc = "WindowAttention: exact attention to the keys within a band −L ≤ j − i ≤ R of each query (sliding-window attention) at linear cost (see github.com/linearize/linearize/ops)."

// WindowOp is the op type of WindowAttention.
const WindowOp = "WindowAttention"

// WindowAttrs are the attributes of WindowAttention.
type WindowAttrs struct {
	// Scale multiplies q·k; zero selects 1/√D.
	Scale float32
	// Left and Right are the band's widths L and R (≥ 0).
	Left, Right int
	// Alibi holds ALiBi's slopes, one per head (nil: no ALiBi); see
	// LocalPooledAttrs.Alibi.
	Alibi []float32
	// Threads bounds the goroutines the Go kernel uses (not an attribute).
	Threads int
}

var windowSchema = newSchema(OpSchema{
	Op: WindowOp, Doc: windowDoc, File: "ops/window.go",
	Inputs: qkvInputs(selfQKV, keyBiasInput),
	Output: "[B,H,S,Dv]",
}, func(a *WindowAttrs) *int { return &a.Threads },
	scaleField(scaleDoc, func(a *WindowAttrs) *float32 { return &a.Scale }),
	intField(AttrSchema{Name: "window_left", Required: true, Min: 0, Max: MaxLocalBlock,
		Doc: "L: query i attends to keys j ≥ i − L"}, func(a *WindowAttrs) *int { return &a.Left }),
	intField(AttrSchema{Name: "window_right", Required: true, Min: 0, Max: MaxLocalBlock,
		Doc: "R: query i attends to keys j ≤ i + R (0: a causal window)"}, func(a *WindowAttrs) *int { return &a.Right }),
	floatsField(AttrSchema{Name: "alibi", Doc: alibiSlopesDoc + ": every score of query i gets −m_h·abs(i − j) (the positions, padding included): dense ALiBi attention restricted to the band"}, func(a *WindowAttrs) *[]float32 { return &a.Alibi }),
)

// localPooled returns the LocalPooledAttention band mode that computes a.
func (a WindowAttrs) localPooled() LocalPooledAttrs {
	return LocalPooledAttrs{Scale: a.Scale, Block: max(a.Left, a.Right, 1), Reach: 1,
		Band: true, WindowLeft: a.Left, WindowRight: a.Right, Alibi: a.Alibi, Threads: a.Threads}
}

func (a WindowAttrs) check() error {
	if err := windowSchema.check(&a); err != nil {
		return err
	}
	if err := checkAlibi(WindowOp, a.Alibi); err != nil {
		return err
	}
	return a.localPooled().check()
}

// ParseWindowAttrs reads the attributes of a WindowAttention node.
func ParseWindowAttrs(n *onnxpb.NodeProto) (WindowAttrs, error) {
	return windowSchema.parse(n)
}

func init() {
	windowSchema.register(func(a WindowAttrs, in []*onnx.Tensor) (*onnx.Tensor, error) {
		return WindowAttend(in[0], in[1], in[2], in[3], a)
	})
}

// WindowAttend computes WindowAttention in float32 with float64 sums.
// bias may be nil (every key valid).
func WindowAttend(q, k, v, bias *onnx.Tensor, a WindowAttrs) (*onnx.Tensor, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	return localPooled(WindowOp, q, k, v, bias, a.localPooled())
}

// NewWindowNode returns a WindowAttention node reading inputs (Q, K, V,
// key_bias) and writing output.
func NewWindowNode(name string, inputs []string, output string, a WindowAttrs) *onnxpb.NodeProto {
	return windowSchema.node(name, inputs, output, &a)
}

// WindowFunction returns the FunctionProto that defines WindowAttention
// with standard ops at opset (11..23). The band and the ALiBi slopes of a
// are built into the body (the body of LocalPooledAttention's band mode):
// the function serves nodes with those widths and slopes (and as many
// heads); scale is read from the node.
func WindowFunction(opset int64, a WindowAttrs) (*onnxpb.FunctionProto, error) {
	return localPooledFunction(windowSchema, windowDoc, opset, a.check, a.localPooled())
}
