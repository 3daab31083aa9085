package convert_test

import (
	"fmt"

	"github.com/linearize/linearize/convert"
)

// The cost model for BERT-base width, 2 layers, M = k = 256: the speedups
// issue 7 quotes, and where the linear forms start to pay.
func ExampleCostModel() {
	cm := convert.CostModel{
		Dims:     convert.Dims{Layers: 2, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 3072},
		Features: 256,
		K:        256,
	}
	for _, n := range []int{512, 4096, 8192, 16384} {
		fmt.Printf("n=%-5d performer %.2fx linformer %.2fx, original scores %d MiB per layer\n",
			n, cm.Speedup(convert.Performer, n), cm.Speedup(convert.Linformer, n), cm.Layer(convert.Original, n).Largest>>20)
	}
	fmt.Println("crossover:", cm.Crossover(convert.Performer), cm.Crossover(convert.Linformer))
	// Output:
	// n=512   performer 1.00x linformer 1.00x, original scores 12 MiB per layer
	// n=4096  performer 1.70x linformer 1.70x, original scores 768 MiB per layer
	// n=8192  performer 2.50x linformer 2.50x, original scores 3072 MiB per layer
	// n=16384 performer 4.10x linformer 4.10x, original scores 12288 MiB per layer
	// crossover: 517 513
}
