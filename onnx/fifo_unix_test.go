//go:build linux || darwin

package onnx

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestLoadFromFIFO: a named pipe has no size (Stat says 0), so Load reads
// it to its end: a model written into one loads like the file it came
// from, and a pipe closed without a byte is an empty file.
func TestLoadFromFIFO(t *testing.T) {
	src := filepath.Join("..", "testdata", "bert-tiny.onnx")
	want, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{"model", data, ""},
		{"nothing", nil, "empty file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "model.fifo")
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Skipf("no named pipes here: %v", err)
			}
			wrote := make(chan error, 1)
			go func() {
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err == nil {
					_, err = f.Write(c.data)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
				wrote <- err
			}()
			got, err := Load(p)
			if werr := <-wrote; werr != nil {
				t.Fatalf("writing the pipe: %v", werr)
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "model.fifo") {
					t.Fatalf("Load: %v; want an error naming the pipe and %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !proto.Equal(got, want) {
				t.Error("the model read from the pipe differs from the file's")
			}
		})
	}
}
