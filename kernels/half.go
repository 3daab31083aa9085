package kernels

import "github.com/linearize/linearize/onnx"

// HalfWidened lets a float32 kernel take float16 and bfloat16 inputs:
// they are widened to float32 and the float outputs narrowed back, as the
// custom ops' typed function bodies do (ops.TypedFunction). It serves the
// custom ops and onnxruntime's contrib ops, which published fp16 models
// hold.
func HalfWidened(k Kernel) Kernel {
	return func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		wide, copied := in, false
		for i, t := range in {
			if t == nil || (t.DType != onnx.Float16 && t.DType != onnx.BFloat16) {
				continue
			}
			if !copied {
				wide, copied = append([]*onnx.Tensor(nil), in...), true
			}
			wide[i] = toFloat32(t)
		}
		out, err := k(ctx, wide)
		if err != nil || !copied {
			return out, err
		}
		// Outputs take Q's type (the first input's), or for an op whose
		// first input is not a float (EmbedLayerNormalization's ids) the
		// first half-precision input's.
		dt := onnx.Float
		for _, t := range in {
			if t != nil && (t.DType == onnx.Float16 || t.DType == onnx.BFloat16) {
				dt = t.DType
				break
			}
			if t != nil && t.DType == onnx.Float {
				break
			}
		}
		if dt == onnx.Float {
			return out, nil
		}
		for i, t := range out {
			if t != nil && t.DType == onnx.Float {
				out[i] = fromFloat32(t, dt)
			}
		}
		return out, nil
	}
}
