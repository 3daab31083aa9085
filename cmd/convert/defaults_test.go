package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// Each conversion command without flags writes byte for byte the model
// its library function writes with zero-value options (and the CLI's
// seed): the commands only map flags, the defaults live in the library.
func TestCommandDefaultsAreLibraryDefaults(t *testing.T) {
	tiny := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	m, err := onnx.Load(tiny)
	if err != nil {
		t.Fatal(err)
	}
	type conv func() (*onnxpb.ModelProto, *convert.Report, error)
	for _, c := range []struct {
		args []string
		lib  conv
	}{
		{[]string{"performer"}, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(m, convert.PerformerOptions{Seed: cli.DefaultSeed})
		}},
		{[]string{"local-pooled"}, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLocalPooled(m, convert.LocalPooledOptions{})
		}},
		{[]string{"lara"}, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLARA(m, convert.LaraOptions{Seed: cli.DefaultSeed})
		}},
		{[]string{"hedgehog", "--steps", "0"}, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToHedgehog(m, convert.HedgehogOptions{Seed: cli.DefaultSeed})
		}},
		{[]string{"long"}, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLong(m, convert.LongOptions{Seed: cli.DefaultSeed})
		}},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.onnx")
			args := append([]string{c.args[0], tiny, "-o", out}, c.args[1:]...)
			if code, stdout, stderr := runCLI(args...); code != 0 {
				t.Fatalf("%v: exit %d\n%s%s", args, code, stdout, stderr)
			}
			got, err := onnx.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := c.lib()
			if err != nil {
				t.Fatal(err)
			}
			// Through a file and back, as the CLI's model was.
			wantPath := filepath.Join(t.TempDir(), "want.onnx")
			if err := onnx.Save(want, wantPath, onnx.SaveOptions{}); err != nil {
				t.Fatal(err)
			}
			if want, err = onnx.Load(wantPath); err != nil {
				t.Fatal(err)
			}
			a, _ := proto.MarshalOptions{Deterministic: true}.Marshal(got)
			b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(want)
			if !bytes.Equal(a, b) {
				t.Errorf("convert %v writes another model than the library's zero-value options", c.args)
			}
		})
	}
}
