package ops

import "github.com/linearize/linearize/onnx"

// TensorBytes returns the bytes a tensor of type dt and shape takes, as
// the tensor budget counts them (MaxTensorBytes): a string counts as its
// header (16 bytes), an unknown type as 8; -1 when the size overflows an
// int64 or a dimension is negative.
func TensorBytes(dt onnx.DataType, shape []int) int64 { return tensorBytes(dt, shape) }
