package convert_test

import (
	"fmt"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
)

// A ModernBERT-shaped encoder has global layers and sliding-window
// layers; Detect reads each window's band from the mask the graph builds,
// ToWindow makes the window layers exact WindowAttention, and
// ToLocalPooled converts the global layers too.
func ExampleToWindow() {
	m, err := models.ModernBERT(models.ModernBERTTinyConfig()) // 3 layers: global, local ±8, local ±8
	if err != nil {
		panic(err)
	}
	d, err := convert.Detect(m)
	if err != nil {
		panic(err)
	}
	for _, b := range d.Blocks {
		if b.Window != nil {
			fmt.Printf("block %d: window %s\n", b.Layer, b.Window)
		} else {
			fmt.Printf("block %d: global, bias %s\n", b.Layer, b.Bias)
		}
	}
	_, rep, err := convert.ToWindow(m, convert.WindowOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("window: %d of %d blocks converted\n", len(rep.Converted), rep.Blocks)
	_, rep, err = convert.ToLocalPooled(m, convert.LocalPooledOptions{})
	if err != nil {
		panic(err)
	}
	for _, br := range rep.Converted {
		op := br.Op
		if op == "" {
			op = rep.Op
		}
		fmt.Printf("local-pooled: block %d → %s\n", br.Layer, op)
	}
	// Output:
	// block 0: global, bias per-key
	// block 1: window ±8
	// block 2: window ±8
	// window: 2 of 3 blocks converted
	// local-pooled: block 0 → LocalPooledAttention
	// local-pooled: block 1 → WindowAttention
	// local-pooled: block 2 → WindowAttention
}
