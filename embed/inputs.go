package embed

import (
	"fmt"
	"strings"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
)

// Roles of a BERT-style model's token-level inputs, guessed from their
// names as infer.TextInputs guesses them, plus position ids.
const (
	roleIDs       = "ids"
	roleMask      = "mask"
	roleTokenType = "token_type"
	rolePosition  = "position"
)

// inputRole is the role of the input called name, or "" when the name
// says nothing.
func inputRole(name string) string {
	n := strings.ToLower(name)
	switch {
	case strings.Contains(n, "position"):
		return rolePosition
	case strings.Contains(n, "type") || strings.Contains(n, "segment"):
		return roleTokenType
	case strings.Contains(n, "mask"):
		return roleMask
	case strings.Contains(n, "ids") || strings.Contains(n, "input") || strings.Contains(n, "token"):
		return roleIDs
	}
	return ""
}

// intTensor makes the tensor of input in, of the given shape, from data
// in the input's declared element type (int64, int32 or float32).
func intTensor(in infer.Value, shape []int, data []int64) (*onnx.Tensor, error) {
	switch in.DType {
	case onnx.Int64, onnx.Undefined:
		return onnx.NewInt64(shape, append([]int64(nil), data...)), nil
	case onnx.Int32:
		d := make([]int32, len(data))
		for i, v := range data {
			d[i] = int32(v)
		}
		return &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: d}, nil
	case onnx.Float:
		d := make([]float32, len(data))
		for i, v := range data {
			d[i] = float32(v)
		}
		return onnx.NewFloat(shape, d), nil
	}
	return nil, fmt.Errorf("input %q is %s; token inputs are int64, int32 or float32", in.Name, onnx.TypeName(in.DType))
}
