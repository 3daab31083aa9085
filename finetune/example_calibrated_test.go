package finetune_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/tokenize"
)

// exampleTokenizer is a WordPiece tokenizer of a few words, whose ids the
// tiny BERT's vocabulary holds.
func exampleTokenizer() *tokenize.Tokenizer {
	vocab := map[string]int64{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
	for i, w := range strings.Fields("the man is eating food . a horse runs in field and sleeps") {
		vocab[w] = int64(10 + i)
	}
	tok, err := tokenize.New(vocab, tokenize.DefaultOptions())
	if err != nil {
		log.Fatal(err)
	}
	return tok
}

// exampleDocs returns n documents of the tokenizer's words, each words
// long and in its own order.
func exampleDocs(n, words int) []string {
	vocab := strings.Fields("the man is eating food . a horse runs in field and sleeps")
	docs := make([]string, n)
	for d := range docs {
		w := make([]string, words)
		for i := range w {
			w[i] = vocab[(i*(d+2)+d*d)%len(vocab)]
		}
		docs[d] = strings.Join(w, " ")
	}
	return docs
}

// Convert a model to HedgehogAttention (exact attention to the nearby
// keys, learned feature maps for the rest) and train the maps on
// calibration documents in one call, as `convert hedgehog` does. The
// teacher and the held-out check run on the pure-Go backend here; each
// layer keeps the maps of its lowest error on the held-out documents, so
// no layer ends worse on them than it began. trep.Text() is the table
// `convert hedgehog` prints, and onnx.Save writes the trained model.
func ExampleTrainHedgehog() {
	m, err := models.BERT(models.TinyConfig())
	if err != nil {
		log.Fatal(err)
	}
	trained, rep, trep, err := finetune.TrainHedgehog(m, exampleDocs(8, 60), finetune.HedgehogOptions{
		Convert:  convert.HedgehogOptions{Block: 8, Seed: 1},
		Windows:  finetune.WindowOptions{Tokenizer: exampleTokenizer(), SeqLen: 32},
		Transfer: finetune.TransferOptions{Steps: 20, Windows: 4, Seed: 1, Backend: "native"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d blocks converted to %s, %d functions in the model\n", len(rep.Converted), rep.Op, len(trained.Functions))
	fmt.Printf("%d calibration windows of %d tokens, %d held out\n", trep.Rows, trep.SeqLen, trep.HeldRows)
	for _, l := range trep.Layers {
		fmt.Printf("layer %d: held-out error no higher: %v\n", l.Layer, l.HeldAfter <= l.HeldBefore)
	}
	// Output:
	// 2 blocks converted to HedgehogAttention, 1 functions in the model
	// 16 calibration windows of 32 tokens, 4 held out
	// layer 0: held-out error no higher: true
	// layer 1: held-out error no higher: true
}

// Give a 128-position encoder one pass over inputs of up to 512 tokens:
// each window of 16 tokens is read exactly and the other windows through
// learned feature maps, trained on rows of four windows cut from the
// documents, as `convert long --learned` does.
func ExampleTrainLong() {
	m, err := models.BERT(models.TinyConfig())
	if err != nil {
		log.Fatal(err)
	}
	_, rep, trep, err := finetune.TrainLong(m, exampleDocs(8, 120), finetune.LongOptions{
		Convert:  convert.LongOptions{Window: 16, MaxLength: 512, Seed: 1},
		Windows:  finetune.WindowOptions{Tokenizer: exampleTokenizer(), SeqLen: 64},
		Transfer: finetune.TransferOptions{Steps: 20, Windows: 4, Seed: 1, Backend: "native"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d blocks converted to %s\n", len(rep.Converted), rep.Op)
	fmt.Printf("%d calibration rows of %d tokens, %d held out\n", trep.Rows, trep.SeqLen, trep.HeldRows)
	// Output:
	// 2 blocks converted to HedgehogAttention
	// 24 calibration rows of 64 tokens, 6 held out
}

// Transfer is the training step alone: convert with convert.ToHedgehog,
// cut documents into calibration rows (DocumentWindows), choose the
// documents held out (Calibration.HoldOut) and train.
func ExampleTransfer() {
	m, err := models.BERT(models.TinyConfig())
	if err != nil {
		log.Fatal(err)
	}
	conv, _, err := convert.ToHedgehog(m, convert.HedgehogOptions{Block: 8, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	cal, err := finetune.DocumentWindows(exampleTokenizer(), infer.GraphInputs(conv), exampleDocs(8, 60), 32, 0, 0)
	if err != nil {
		log.Fatal(err)
	}
	_, rep, err := finetune.Transfer(conv, cal, finetune.TransferOptions{
		Objective: finetune.ObjectiveWeights, // Hedgehog's attention distillation
		Steps:     20, Windows: 4, Seed: 1, Backend: "native",
		HeldOut: cal.HoldOut(0.25),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s objective: %d layers trained on %d windows, %d held out\n", rep.Objective, len(rep.Layers), rep.Rows-rep.HeldRows, rep.HeldRows)
	// Output:
	// weights objective: 2 layers trained on 12 windows, 4 held out
}

// Convert a model to Performer attention with FAVOR# feature maps fitted
// to the original model's attention on calibration inputs, as `convert
// performer --calibration` does.
func ExampleCalibratedPerformer() {
	m, err := models.BERT(models.TinyConfig())
	if err != nil {
		log.Fatal(err)
	}
	feed, err := infer.RandomInputs(m, infer.GraphInputs(m), infer.RandomOptions{Batch: 8, SeqLen: 32, Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	_, rep, err := finetune.CalibratedPerformer(m, feed, convert.PerformerOptions{Features: 16, Seed: 1},
		finetune.MomentOptions{Backend: "native"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d blocks converted to %s, %s features\n", len(rep.Converted), rep.Op, rep.Options.FeatureMap)
	// Output:
	// 2 blocks converted to PerformerAttention, aderf features
}
