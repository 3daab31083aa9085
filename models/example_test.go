package models_test

import (
	"fmt"

	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
)

// Build the bundled tiny BERT and look at its interface.
func ExampleBERT() {
	m, err := models.BERT(models.TinyConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, in := range m.Graph.Input {
		dt, shape, _ := onnx.TensorType(in)
		fmt.Println("input ", in.GetName(), onnx.TypeName(dt), dims(shape))
	}
	for _, out := range m.Graph.Output {
		dt, shape, _ := onnx.TensorType(out)
		fmt.Println("output", out.GetName(), onnx.TypeName(dt), dims(shape))
	}
	fmt.Println("softmax nodes:", onnx.Summarize(m).Ops["ai.onnx"]["Softmax"])
	// Output:
	// input  input_ids int64 [batch_size sequence_length]
	// input  attention_mask int64 [batch_size sequence_length]
	// input  token_type_ids int64 [batch_size sequence_length]
	// output last_hidden_state float32 [batch_size sequence_length 64]
	// output pooler_output float32 [batch_size 64]
	// softmax nodes: 2
}

func dims(shape []onnx.Dim) []string {
	var s []string
	for _, d := range shape {
		if d.Param != "" {
			s = append(s, d.Param)
		} else {
			s = append(s, fmt.Sprint(d.Value))
		}
	}
	return s
}
