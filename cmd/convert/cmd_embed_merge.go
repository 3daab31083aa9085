package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/embed"
)

// runEmbedMerge (command embed-merge, "DIR... [flags]") checks that folders of parts written by embed (the
// shards of one run, or one folder; of .npy or .parquet parts) belong
// together and, with -o, merges them.
func runEmbedMerge(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("embed-merge", flag.ContinueOnError)
	out := fs.String("o", "", "write the merged vectors to `OUT`: OUT.npy (+ OUT.ids.txt), OUT.jsonl, OUT.parquet, or a new folder of parts (ending in /; its parts in the first folder's part format); without -o, only verify")
	dirs, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return cli.UsageError("want the folders of parts (DIR ...) written by embed -o DIR/")
	}
	var outputs []namedFile
	if *out != "" {
		switch {
		case isFolderOut(*out):
			*out = strings.TrimRight(*out, `/\`)
		case strings.HasSuffix(*out, ".npy"):
			outputs = []namedFile{{"-o", *out}, {"the ids file of -o", embed.IDsPath(*out)}}
		case strings.HasSuffix(*out, ".jsonl"), strings.HasSuffix(*out, ".parquet"):
			outputs = []namedFile{{"-o", *out}}
		default:
			return cli.UsageError("-o %s: want a path ending in .parquet, .npy or .jsonl, or a folder (ending in /)", *out)
		}
		for _, d := range dirs {
			if sameDir(d, *out) {
				return cli.UsageError("-o %s is the input folder %s: merge into another one", *out, d)
			}
		}
		if err := checkOutputs(outputs, nil); err != nil {
			return err
		}
	}
	v, err := embed.VerifyParts(dirs)
	if err != nil {
		return cli.BadInput(err)
	}
	what := "1 folder"
	if v.Shards > 0 {
		what = fmt.Sprintf("%d shards", v.Shards)
	}
	fmt.Fprintf(stdout, "verified %s: %d documents, %d vectors, every id once; manifests agree (model sha256 %.12s…, mode %s, pooling %s, window %d)\n",
		what, v.Documents, v.Vectors, v.Manifests[0].Model.SHA256, v.Manifests[0].Settings.Mode, v.Manifests[0].Settings.Pooling, v.Manifests[0].Settings.Window)
	if *out == "" {
		return nil
	}
	if err := v.Merge(*out); err != nil {
		return cli.RuntimeFailure(err)
	}
	fmt.Fprintf(stdout, "wrote %d vectors → %s\n", v.Vectors, *out)
	return nil
}
