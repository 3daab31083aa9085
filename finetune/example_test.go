package finetune_test

import (
	"fmt"
	"log"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
)

// Convert a model to Linformer, fit the projections to the original's
// attention on calibration inputs, and save the result. (Needs the
// onnxruntime library from scripts/setup.sh; not run as a test.)
func ExampleFit() {
	orig, err := models.BERT(models.TinyConfig())
	if err != nil {
		log.Fatal(err)
	}
	conv, _, err := convert.ToLinformer(orig, convert.LinformerOptions{Init: "gaussian", K: 8, MaxLen: 32, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	calib, err := infer.RandomInputs(orig, infer.GraphInputs(orig), infer.RandomOptions{Batch: 8, SeqLen: 32, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	fitted, rep, err := finetune.Fit(orig, conv, calib, finetune.Options{Steps: 100, Batch: 4, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(rep.Text())
	if err := onnx.Save(fitted, "linformer-fitted.onnx", onnx.SaveOptions{}); err != nil {
		log.Fatal(err)
	}
}
