package infer

import (
	"fmt"
	"math"
	"strings"

	"github.com/linearize/linearize/onnx"
)

// Diff summarizes how a tensor differs from a reference tensor.
type Diff struct {
	// Mismatch is non-empty when the tensors cannot be compared element
	// by element (different type or shape); the numbers are then zero.
	Mismatch string  `json:"mismatch,omitempty"`
	N        int     `json:"n"`        // elements compared
	MaxAbs   float64 `json:"max_abs"`  // max |a−b|
	MeanAbs  float64 `json:"mean_abs"` // mean |a−b|
	// MaxRel is max |a−b| / max(|a|,|b|) over elements where either is
	// non-zero; it is large where the reference is near zero.
	MaxRel float64 `json:"max_rel"`
	// Scale is max |b|, the reference's magnitude; Scaled = MaxAbs/Scale
	// (MaxAbs when Scale < 1e-12) is the error relative to the output's
	// scale, the figure agreement tolerances are stated in.
	Scale  float64 `json:"scale"`
	Scaled float64 `json:"scaled"`
	// Cosine is the cosine similarity of a and b as vectors (1 when both
	// are zero).
	Cosine float64 `json:"cosine"`
	// NaNMismatch counts elements that are NaN in exactly one tensor.
	NaNMismatch int `json:"nan_mismatch,omitempty"`
	// NaN and Inf count the non-finite elements of a, RefNaN and RefInf
	// those of the reference b. The figures above are taken over the
	// elements finite in both (so they stay finite, and JSON can hold
	// them); any non-finite element fails OK, even where both tensors
	// hold the same NaN or Inf: a non-finite result never agrees.
	NaN    int `json:"nan,omitempty"`
	Inf    int `json:"inf,omitempty"`
	RefNaN int `json:"ref_nan,omitempty"`
	RefInf int `json:"ref_inf,omitempty"`
}

// OK reports whether the tensors agree within tol relative to the
// reference's scale, every element of both being finite.
func (d Diff) OK(tol float64) bool {
	return d.Mismatch == "" && !d.HasNonFinite() && d.Scaled <= tol
}

// HasNonFinite reports whether either tensor holds a NaN or an Inf.
func (d Diff) HasNonFinite() bool {
	return d.NaN+d.Inf+d.RefNaN+d.RefInf+d.NaNMismatch > 0
}

// NonFinite says which tensor holds how many NaN and Inf values, naming
// them a and b ("non-finite: 12 NaN in the converted output; 3 Inf in the
// reference"), or returns "" when every element of both is finite.
func (d Diff) NonFinite(a, b string) string {
	return NonFiniteText(d.NaN, d.Inf, a, d.RefNaN, d.RefInf, b)
}

// NonFiniteText words counts of NaN and Inf values in two tensors named
// a and b as Diff.NonFinite does; "" when all four are 0.
func NonFiniteText(nan, inf int, a string, refNaN, refInf int, b string) string {
	var parts []string
	for _, side := range []struct {
		nan, inf int
		name     string
	}{{nan, inf, a}, {refNaN, refInf, b}} {
		var n []string
		if side.nan > 0 {
			n = append(n, fmt.Sprintf("%d NaN", side.nan))
		}
		if side.inf > 0 {
			n = append(n, fmt.Sprintf("%d Inf", side.inf))
		}
		if len(n) > 0 {
			parts = append(parts, strings.Join(n, " and ")+" in "+side.name)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "non-finite: " + strings.Join(parts, "; ")
}

func (d Diff) String() string {
	if d.Mismatch != "" {
		return "mismatch: " + d.Mismatch
	}
	s := fmt.Sprintf("max abs %.3g, max rel %.3g, mean abs %.3g, scaled %.3g, cosine %.6f", d.MaxAbs, d.MaxRel, d.MeanAbs, d.Scaled, d.Cosine)
	if d.NaNMismatch > 0 {
		s += fmt.Sprintf(", %d NaN mismatches", d.NaNMismatch)
	}
	if nf := d.NonFinite("the tensor", "the reference"); nf != "" {
		s += ", " + nf
	}
	return s
}

// CompareTensors compares a with the reference b. Numeric and bool tensors
// of the same type and shape are compared element by element in float64.
func CompareTensors(a, b *onnx.Tensor) Diff {
	if a == nil || b == nil {
		return Diff{Mismatch: "missing tensor"}
	}
	if a.DType != b.DType {
		return Diff{Mismatch: fmt.Sprintf("type %s vs %s", onnx.TypeName(a.DType), onnx.TypeName(b.DType))}
	}
	if len(a.Shape) != len(b.Shape) || a.Len() != b.Len() {
		return Diff{Mismatch: fmt.Sprintf("shape %v vs %v", a.Shape, b.Shape)}
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return Diff{Mismatch: fmt.Sprintf("shape %v vs %v", a.Shape, b.Shape)}
		}
	}
	x, err := a.AsFloat64s()
	if err != nil {
		return Diff{Mismatch: err.Error()}
	}
	y, err := b.AsFloat64s()
	if err != nil {
		return Diff{Mismatch: err.Error()}
	}
	d := Diff{N: len(x)}
	var sum, dot, nx, ny float64
	finite := 0
	for i := range x {
		xi, yi := x[i], y[i]
		xn, yn := math.IsNaN(xi), math.IsNaN(yi)
		xInf, yInf := math.IsInf(xi, 0), math.IsInf(yi, 0)
		if xn || yn || xInf || yInf {
			if xn != yn {
				d.NaNMismatch++
			}
			d.NaN += b2i(xn)
			d.Inf += b2i(xInf)
			d.RefNaN += b2i(yn)
			d.RefInf += b2i(yInf)
			continue
		}
		finite++
		e := math.Abs(xi - yi)
		sum += e
		d.MaxAbs = max(d.MaxAbs, e)
		if m := max(math.Abs(xi), math.Abs(yi)); m > 0 {
			d.MaxRel = max(d.MaxRel, e/m)
		}
		d.Scale = max(d.Scale, math.Abs(yi))
		dot += xi * yi
		nx += xi * xi
		ny += yi * yi
	}
	if finite > 0 {
		d.MeanAbs = sum / float64(finite)
	}
	d.Scaled = d.MaxAbs
	if d.Scale >= 1e-12 {
		d.Scaled = d.MaxAbs / d.Scale
	}
	switch {
	case nx == 0 && ny == 0:
		d.Cosine = 1
	case nx == 0 || ny == 0:
		d.Cosine = 0
	default:
		d.Cosine = dot / math.Sqrt(nx*ny)
	}
	return d
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// OutputDiff is the comparison of one output of two sessions.
type OutputDiff struct {
	Name string `json:"name"`
	Diff
}

// CompareSessions runs a and b (the reference) on the same inputs and
// compares the named outputs (every output of b when names is empty).
func CompareSessions(a, b Session, inputs map[string]*onnx.Tensor, names ...string) ([]OutputDiff, error) {
	if len(names) == 0 {
		for _, o := range b.Outputs() {
			names = append(names, o.Name)
		}
	}
	ra, err := a.Run(inputs, names...)
	if err != nil {
		return nil, err
	}
	rb, err := b.Run(inputs, names...)
	if err != nil {
		return nil, err
	}
	out := make([]OutputDiff, len(names))
	for i, n := range names {
		out[i] = OutputDiff{Name: n, Diff: CompareTensors(ra[n], rb[n])}
	}
	return out, nil
}
