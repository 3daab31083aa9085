package cli

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/linearize/linearize/onnx"
)

// CheckOutput vets -o before any work is done: writing over the input
// model needs --overwrite (a usage error otherwise), and the output folder
// must exist (bad input otherwise). in is "" for commands without an input
// model.
func CheckOutput(in, out string, overwrite bool) error {
	err := onnx.CheckSavePath(out, onnx.SaveOptions{Input: in, Overwrite: overwrite})
	if errors.Is(err, onnx.ErrOverwriteInput) {
		return UsageError("-o %s is the input model; pass --overwrite to replace it", out)
	}
	return BadInput(err)
}

// PrintJSON writes v to w as the commands' --json prints: indented by two
// spaces, one line break at the end.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
