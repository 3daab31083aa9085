package convert_test

import (
	"fmt"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
)

// The zero value of every options struct is what the command of the same
// name does with no flags: here ToLocalPooled with blocks of 64, 64
// segments and both sinks, ToLinformer pooled to 128 segments, and
// ToPerformer with 256 centred FAVOR++ features. Report.Options gives
// the values a conversion used.
func Example_defaults() {
	m, err := models.BERT(models.TinyConfig())
	if err != nil {
		panic(err)
	}
	_, lp, err := convert.ToLocalPooled(m, convert.LocalPooledOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: block %d, segments %d, sinks %s\n", lp.Op, lp.Options.Block, lp.Options.Segments, lp.Options.Sinks)
	_, lin, err := convert.ToLinformer(m, convert.LinformerOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: segments %d, sinks %s\n", lin.Op, lin.Options.Segments, lin.Options.Sinks)
	_, perf, err := convert.ToPerformer(m, convert.PerformerOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %d features, %s, centred %v\n", perf.Op, perf.Options.Features, perf.Options.FeatureMap, perf.Options.Center)
	// Output:
	// LocalPooledAttention: block 64, segments 64, sinks first,last
	// LinformerAttention: segments 128, sinks first,last
	// PerformerAttention: 256 features, favor++, centred true
}
