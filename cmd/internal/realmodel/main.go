// Command realmodel builds testdata/real/minilm.onnx from the unpacked
// Hugging Face folder (config.json + model.safetensors) with models.BERT.
// scripts/real-model.sh runs it; it is not part of the product CLI.
//
//	go run ./cmd/internal/realmodel -dir testdata/real/minilm -o testdata/real/minilm.onnx
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
)

func main() {
	dir := flag.String("dir", "testdata/real/minilm", "Hugging Face model folder")
	out := flag.String("o", "testdata/real/minilm.onnx", "output ONNX model")
	flag.Parse()
	m, cfg, err := models.Pretrained(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realmodel:", err)
		os.Exit(2)
	}
	producer := "linearize models.Pretrained"
	m.ProducerName = &producer
	if err := onnx.Save(m, *out, onnx.SaveOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, "realmodel:", err)
		os.Exit(3)
	}
	fmt.Printf("realmodel: wrote %s (BERT, %d layers, hidden %d, %d heads, FFN %d)\n", *out, cfg.Layers, cfg.Hidden, cfg.Heads, cfg.Intermediate)
}
