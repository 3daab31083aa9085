package main

import (
	"flag"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The command of the local-pooled conversion (convert.Conversions).
var _ = conversionCommand(&cli.Command{Name: "local-pooled", Usage: "MODEL -o OUT [flags]",
	Summary: "rewrite attention into exact local + pooled far attention",
	Detail:  "LocalPooledAttention: exact attention to the query's block, both neighbours and sink tokens, plus one pooled key per segment of the rest; no parameters, no length limit",
	Example: "local-pooled model.onnx -o out/lp.onnx"}, "", localPooledFlags)

// localPooledFlags adds local-pooled's flags to fs and returns its
// conversion.
func localPooledFlags(fs *flag.FlagSet) rewrite {
	var o convert.LocalPooledOptions
	o.Block, o.Segments, o.Sinks = convert.DefaultBlock, convert.DefaultSegments, convert.DefaultSinks
	fs.Var(&intFlag{&o.Block, 1}, "block", "local block length `B`: each query sees its block and both neighbours exactly (for no local part use convert linformer --init pool)")
	fs.Var(&intFlag{&o.Segments, 1}, "segments", "pooled segments `K` standing for the rest of the sequence")
	cli.StringLikeVar(fs, &o.Sinks, "sinks", "tokens every query sees exactly: first,last, first, last or none")
	return func(m *onnxpb.ModelProto, r *rewriteRun) (*onnxpb.ModelProto, *convert.Report, error) {
		o.Layers, o.Positions = r.layers, r.positions
		out, rep, err := convert.ToLocalPooled(m, o)
		return out, rep, optionError(err, flagsOf("Block", "block", "Segments", "segments", "Sinks", "sinks"))
	}
}
