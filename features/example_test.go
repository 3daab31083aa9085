package features_test

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/features"
)

// Sample frozen random features for layer 3 of a model with 12 heads of
// width 64, shared by the heads, and check two rows of one orthogonal block.
func ExampleOmega() {
	omega, err := features.Omega(1, 3, 12, 256, 64, features.OmegaOptions{Kind: features.Orthogonal, Norms: features.NormsSqrtD})
	if err != nil {
		fmt.Println(err)
		return
	}
	x := omega.Floats()
	var dot, norm float64
	for j := 0; j < 64; j++ {
		dot += float64(x[j]) * float64(x[64+j])
		norm += float64(x[j]) * float64(x[j])
	}
	fmt.Println(omega.Shape)
	fmt.Printf("row 0 · row 1 = %.4f, |row 0| = %.4f\n", math.Abs(dot), math.Sqrt(norm))
	// Output:
	// [1 256 64]
	// row 0 · row 1 = 0.0000, |row 0| = 8.0000
}

// Linformer projections for a 512-token limit with k = 128, E = F shared by
// the heads of one layer.
func ExampleProjection() {
	e, f, err := features.Projection(1, 0, 12, 128, 512, features.ProjOptions{Share: features.ShareKV})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Shape, e == f)
	// Output:
	// [1 128 512] true
}
