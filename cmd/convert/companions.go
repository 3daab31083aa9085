package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/tokenize"
)

// saveModel writes m to out (onnx.Save; in is the model it was made from,
// which out replaces only with overwrite), then copies in's tokenizer and
// configuration files (tokenize.CopyCompanions) into the folder named like
// out, so that the written model runs --text and converts with
// --calibration without --vocab. It says "copied tokenizer files to DIR"
// on stdout; a file it cannot copy is a warning on stderr, not an error:
// the model is written. A failed write is a runtime failure (exit 3).
func saveModel(stdout, stderr io.Writer, m *onnxpb.ModelProto, out, in string, overwrite bool) error {
	var files []fsutil.SetFile
	var copied []string
	var err error
	if in != "" {
		// The model and its tokenizer files are one set: an interruption
		// leaves the old pair or the new one, never a model beside a
		// partial folder.
		files, copied, err = tokenize.CompanionSet(in, out)
	}
	if serr := onnx.SaveWith(m, out, onnx.SaveOptions{Input: in, Overwrite: overwrite}, files...); serr != nil {
		return cli.RuntimeFailure(serr)
	}
	if len(copied) > 0 {
		fmt.Fprintf(stdout, "copied tokenizer files to %s\n", strings.TrimSuffix(out, filepath.Ext(out)))
	}
	if err != nil {
		msg := strings.ReplaceAll(strings.TrimPrefix(err.Error(), "tokenize: "), "\n", "; ")
		fmt.Fprintf(stderr, "convert: warning: %s: %s (pass --vocab PATH when running it)\n", out, msg)
	}
	return nil
}
