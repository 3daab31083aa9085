package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWritersDeterministic runs every command that writes a model twice
// with the same model, flags and seed, at their defaults, and requires
// byte-identical files: the promise docs/reliability.md makes. A map
// iterated in random order, a time stamp or a parallel reduction whose
// order depends on scheduling would fail it.
func TestWritersDeterministic(t *testing.T) {
	in := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	if _, err := os.Stat(in); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"performer", "--seed", "3"},
		{"performer", "--kernel", "trig", "--seed", "3"},
		{"linformer"},
		{"linformer", "--init", "gaussian", "--k", "8", "--max-len", "64", "--seed", "3"},
		{"local-pooled"},
		{"local-pooled", "--block", "16", "--segments", "8"},
		{"local-pooled", "--inline"},
		{"lara", "--landmarks", "8", "--seed", "3"},
		{"long", "--max-length", "1024"},
		{"extend-positions", "--max-positions", "1024"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			dir := t.TempDir()
			var files [2][]byte
			for i := range files {
				out := filepath.Join(dir, []string{"a.onnx", "b.onnx"}[i])
				full := append([]string{args[0], in, "-o", out}, args[1:]...)
				if code, _, errOut := runCLI(full...); code != 0 {
					t.Fatalf("%v: exit %d: %s", full, code, errOut)
				}
				b, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				files[i] = b
			}
			if len(files[0]) == 0 || !bytes.Equal(files[0], files[1]) {
				t.Errorf("two runs wrote %d and %d bytes that differ", len(files[0]), len(files[1]))
			}
		})
	}
}
