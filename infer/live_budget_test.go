package infer_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// constsSummed: k ConstantOfShape values of n float32 each, all alive
// until one Sum reads them; or, with alias, one value and k Identity
// copies of it (which share its data) kept as graph outputs.
func constsSummed(k, n int, alias bool) *onnxpb.ModelProto {
	shape, _ := onnx.EncodeTensor("shape", onnx.NewInt64([]int{1}, []int64{int64(n)}))
	g := &onnxpb.GraphProto{Name: proto.String("live"), Initializer: []*onnxpb.TensorProto{shape}}
	var vals []string
	for i := 0; i < k; i++ {
		v := fmt.Sprintf("c%d", i)
		if alias && i > 0 {
			g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String("Identity"), Input: []string{"c0"}, Output: []string{v}})
		} else {
			g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String("ConstantOfShape"), Input: []string{"shape"}, Output: []string{v}})
		}
		vals = append(vals, v)
	}
	if alias {
		for _, v := range vals {
			g.Output = append(g.Output, onnx.MakeValueInfo(v, onnx.Float, nil))
		}
	} else {
		g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String("Sum"), Input: vals, Output: []string{"y"}})
		g.Output = []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("y", onnx.Float, nil)}
	}
	return &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}}}
}

// TestNativeLiveBytesBudget: values alive at once may take at most twice
// the tensor budget, so that tensors each under the budget cannot add up
// to Go's fatal out-of-memory; outputs sharing an input's data (Identity)
// are not counted twice.
func TestNativeLiveBytesBudget(t *testing.T) {
	prev := kernels.SetMaxTensorBytes(1 << 20) // live limit 2 MiB
	defer kernels.SetMaxTensorBytes(prev)
	const n = 100_000 // 400 kB each
	for _, c := range []struct {
		k      int
		alias  bool
		refuse bool
	}{
		{4, false, false}, // 4 values and their sum: 2.0 MB alive, under 2 MiB
		{6, false, true},  // 2.4 MB alive
		{20, true, false}, // one 400 kB value seen 20 times
	} {
		s, err := infer.Open("native", constsSummed(c.k, n, c.alias), infer.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Run(nil)
		s.Close()
		if got := errors.Is(err, kernels.ErrTensorBudget); got != c.refuse {
			t.Errorf("%d values (alias %v): refused %v (err %v), want %v", c.k, c.alias, got, err, c.refuse)
		}
		if err != nil && !c.refuse {
			t.Errorf("%d values: %v", c.k, err)
		}
	}
}
