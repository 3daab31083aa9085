package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// constantOfShapeModel is a model without inputs whose one node,
// ConstantOfShape, makes a float32 tensor of the given shape.
func constantOfShapeModel(t *testing.T, dims ...int64) *onnxpb.ModelProto {
	t.Helper()
	shape, err := onnx.EncodeTensor("shape", onnx.NewInt64([]int{len(dims)}, dims))
	if err != nil {
		t.Fatal(err)
	}
	op, name, gname, ir, ver, dom := "ConstantOfShape", "make_big", "g", int64(8), int64(17), ""
	return &onnxpb.ModelProto{
		IrVersion:   &ir,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: &dom, Version: &ver}},
		Graph: &onnxpb.GraphProto{
			Name:        &gname,
			Node:        []*onnxpb.NodeProto{{Name: &name, OpType: &op, Input: []string{"shape"}, Output: []string{"Y"}}},
			Initializer: []*onnxpb.TensorProto{shape},
			Output:      []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("Y", onnx.Float, nil)},
		},
	}
}

// TestRunRefusesTensorsOverBudget: a model that asks the native backend
// for a tensor beyond the tensor budget (here set to 1 MiB; by default a
// quarter of the machine's memory) exits 2 with a one-line message naming
// the node and the shape, without a stack trace; a tensor within it runs;
// a malformed $LINEARIZE_MAX_TENSOR_BYTES is a usage error.
func TestRunRefusesTensorsOverBudget(t *testing.T) {
	prev := kernels.SetMaxTensorBytes(1 << 20)
	defer kernels.SetMaxTensorBytes(prev)
	dir := t.TempDir()
	big, small := filepath.Join(dir, "big.onnx"), filepath.Join(dir, "small.onnx")
	writeModel(t, constantOfShapeModel(t, 1000, 1000), big) // 4 MB
	writeModel(t, constantOfShapeModel(t, 512, 512), small) // 1 MiB exactly
	code, _, stderr := safeRun(t, "run", big, "--backend", "native")
	if code != exitBadInput {
		t.Errorf("run big.onnx: exit %d, want %d; stderr: %s", code, exitBadInput, stderr)
	}
	for _, w := range []string{`"make_big"`, "float32[1000 1000]", "4000000 bytes", kernels.MaxTensorBytesEnv} {
		if !strings.Contains(stderr, w) {
			t.Errorf("run big.onnx: message %q does not say %q", stderr, w)
		}
	}
	if strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 || strings.Contains(stderr, "goroutine") {
		t.Errorf("run big.onnx: not a one-line message: %q", stderr)
	}
	if code, out, stderr := safeRun(t, "run", small, "--backend", "native"); code != exitOK || !strings.Contains(out, "float32[512 512]") {
		t.Errorf("run small.onnx: exit %d, stdout %q, stderr %q; want exit 0 and the output", code, out, stderr)
	}
	t.Setenv(kernels.MaxTensorBytesEnv, "plenty")
	if code, _, stderr := safeRun(t, "run", small, "--backend", "native"); code != exitUsage || !strings.Contains(stderr, kernels.MaxTensorBytesEnv) {
		t.Errorf("run with %s=plenty: exit %d, stderr %q; want %d naming the variable", kernels.MaxTensorBytesEnv, code, stderr, exitUsage)
	}
}
