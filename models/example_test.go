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

// Build a ModernBERT with ModernBERT-base's attention pattern (every third
// layer global, the others within ±64 tokens) at a small width.
func ExampleModernBERT() {
	cfg := models.ModernBERTConfig{Vocab: 1000, Hidden: 384, Heads: 6, Layers: 6, Intermediate: 576,
		GlobalEvery: 3, Window: 128, MaxPositions: 8192, Opset: 17, Seed: 1}
	m, err := models.ModernBERT(cfg)
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
	for i := 0; i < cfg.Layers; i++ {
		if cfg.Global(i) {
			fmt.Print("G")
		} else {
			fmt.Print("L")
		}
	}
	fmt.Println()
	ops := onnx.Summarize(m).Ops["ai.onnx"]
	fmt.Println("softmax nodes:", ops["Softmax"], "band tests:", ops["LessOrEqual"])
	// Output:
	// input  input_ids int64 [batch_size sequence_length]
	// input  attention_mask int64 [batch_size sequence_length]
	// output last_hidden_state float32 [batch_size sequence_length 384]
	// GLLGLL
	// softmax nodes: 6 band tests: 1
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
