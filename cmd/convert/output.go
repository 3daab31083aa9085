package main

import (
	"errors"

	"github.com/linearize/linearize/onnx"
)

// checkOutput vets -o before any work is done: writing over the input
// model needs --overwrite (a usage error otherwise), and the output folder
// must exist (bad input otherwise). in is "" for commands without an input
// model.
func checkOutput(in, out string, overwrite bool) error {
	err := onnx.CheckSavePath(out, onnx.SaveOptions{Input: in, Overwrite: overwrite})
	if errors.Is(err, onnx.ErrOverwriteInput) {
		return usageError("-o %s is the input model; pass --overwrite to replace it", out)
	}
	return badInput(err)
}
