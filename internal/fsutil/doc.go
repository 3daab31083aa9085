// Package fsutil writes files atomically: the content goes to a
// temporary file beside the target, which is synced and renamed into
// place, so that the target holds either its old content or all of the
// new. onnx.Save, onnx.WriteNPY and the CLI's JSON and plot outputs use
// it.
package fsutil
