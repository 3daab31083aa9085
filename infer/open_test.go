package infer_test

import (
	"fmt"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
)

// ExampleOpen runs a model with onnxruntime on seeded random inputs (it
// needs the library that scripts/setup.sh installs, so it has no checked
// output).
func ExampleOpen() {
	m, err := onnx.Load("testdata/model.onnx")
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := infer.Open("ort", m, infer.Options{Threads: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	feed, err := infer.RandomInputs(m, s.Inputs(), infer.RandomOptions{Batch: 2, SeqLen: 16, Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	outs, err := s.Run(feed)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range s.Outputs() {
		fmt.Println(v.Name, outs[v.Name])
	}
}
