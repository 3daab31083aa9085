package infer_test

import (
	"fmt"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

func ExampleTextInputs() {
	// A real model's tokenizer comes from tokenize.LoadForModel(modelPath)
	// (the tokenizer.json or vocab.txt beside the model) and its inputs
	// from session.Inputs(); both are spelled out here.
	vocab := map[string]int64{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "linear": 4, "attention": 5, "scales": 6}
	tok, err := tokenize.New(vocab, tokenize.DefaultOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	dims := []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "sequence"}}
	inputs := []infer.Value{
		{Name: "input_ids", DType: onnx.Int64, Shape: dims},
		{Name: "attention_mask", DType: onnx.Int64, Shape: dims},
		{Name: "token_type_ids", DType: onnx.Int64, Shape: dims},
	}
	ti, err := infer.TextInputs(tok, inputs, []string{"Linear attention scales.", "Attention"}, 0, 512)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, in := range inputs {
		fmt.Println(in.Name, ti.Feed[in.Name].Shape, ti.Feed[in.Name].Int64s())
	}
	// Output:
	// input_ids [2 6] [2 4 5 6 1 3 2 5 3 0 0 0]
	// attention_mask [2 6] [1 1 1 1 1 1 1 1 1 0 0 0]
	// token_type_ids [2 6] [0 0 0 0 0 0 0 0 0 0 0 0]
}

func ExampleInputValue() {
	// jina-embeddings-v3's export takes, beside its token inputs, the
	// index of its task adapter as a scalar (session.Inputs() declares it).
	taskID := infer.Value{Name: "task_id", DType: onnx.Int64, Shape: []onnx.Dim{}}
	for _, spec := range []string{"4", "4.5", "task.npy"} {
		t, err := infer.InputValue(taskID, spec)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(t, t.Data)
	}
	// Output:
	// int64[] [4]
	// infer: input "task_id" is int64[]: "4.5" is not an integer
	// onnx: open task.npy: no such file or directory
}
