// Package fsutil writes files atomically: the content goes to a
// temporary file beside the target, which is synced and renamed into
// place, so that the target holds either its old content or all of the
// new. onnx.Save, onnx.WriteNPY and the CLI's JSON and plot outputs use
// it. WriteSet does the same for a set of files that belong together
// (embed's vectors and ids, evaluate's two reports): all old or all new,
// through a journal that the next write into the folder completes after
// a crash.
//
// A temporary file carries its writer's PID and host in its name, so the
// next write to the same path removes those of writers that died (a kill
// -9), and AbortWrites removes those of the writes in progress when the
// process is stopped by a signal (cmd/internal/cli calls it for both binaries).
package fsutil
