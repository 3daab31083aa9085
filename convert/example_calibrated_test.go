package convert_test

import (
	"fmt"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/ops"
)

// ToHedgehog writes HedgehogAttention: each query attends exactly to its
// block and the Reach blocks on either side, and to the other keys
// through learned feature maps, in one normaliser. The maps it draws are
// a starting point only; finetune.TrainHedgehog converts and trains them
// on calibration documents in one call (as `convert hedgehog` does), and
// finetune.Transfer trains the maps of a model converted here.
func ExampleToHedgehog() {
	m, err := models.BERT(models.TinyConfig()) // 2 layers of 4 heads × 16
	if err != nil {
		panic(err)
	}
	hh, rep, err := convert.ToHedgehog(m, convert.HedgehogOptions{Block: 16, Seed: 1})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %d of %d blocks converted, %d parameters added\n", rep.Op, len(rep.Converted), rep.Blocks, rep.Params)
	for _, n := range hh.Graph.Node {
		if n.GetOpType() == ops.HedgehogOp {
			a, err := ops.ParseHedgehogAttrs(n)
			if err != nil {
				panic(err)
			}
			fmt.Printf("%s: block %d, reach %d\n", n.GetName(), a.Block, a.Reach)
		}
	}
	// Output:
	// HedgehogAttention: 2 of 2 blocks converted, 4624 parameters added
	// linearize/layer0/HedgehogAttention: block 16, reach 1
	// linearize/layer1/HedgehogAttention: block 16, reach 1
}

// ToLong gives an encoder of 128 positions one pass over 512 tokens: the
// position table restarts every Window tokens and each window is read
// exactly, as chunking reads it. With Learned the other windows are read
// through feature maps too; finetune.TrainLong converts and trains them
// in one call (as `convert long --learned` does).
func ExampleToLong() {
	m, err := models.BERT(models.TinyConfig())
	if err != nil {
		panic(err)
	}
	long, rep, err := convert.ToLong(m, convert.LongOptions{Window: 32, MaxLength: 512})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %d of %d blocks converted\n", rep.Op, len(rep.Converted), rep.Blocks)
	fmt.Printf("window %s, reads up to %s tokens\n", convert.Meta(long, convert.MetaWindow), convert.Meta(long, convert.MetaMaxLength))
	// Output:
	// LocalPooledAttention: 2 of 2 blocks converted
	// window 32, reads up to 512 tokens
}
