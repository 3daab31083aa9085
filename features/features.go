package features

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/linearize/linearize/internal/splitmix"
	"github.com/linearize/linearize/onnx"
)

// Kind is how the rows of ω are drawn.
type Kind string

// Kinds of ω.
const (
	IID        Kind = "iid"
	Orthogonal Kind = "orthogonal"
)

// Norms is how the row norms of ω are chosen.
type Norms string

// Row-norm choices for ω.
const (
	NormsChi   Norms = "chi"
	NormsSqrtD Norms = "sqrt-d"
	NormsQMC   Norms = "qmc"
)

// Share is how the Linformer projections are shared.
type Share string

// Sharing modes of the Linformer projections.
const (
	ShareNone      Share = "none"
	ShareHeadwise  Share = "headwise"
	ShareKV        Share = "kv"
	ShareLayerwise Share = "layerwise"
)

// OmegaOptions selects how ω is sampled. Zero values select orthogonal
// rows with χ_D norms, shared by all heads.
type OmegaOptions struct {
	Kind  Kind  // Orthogonal or IID
	Norms Norms // NormsChi, NormsSqrtD or NormsQMC
	// PerHead draws one ω per head ([H, M, D]) instead of one for the layer
	// ([1, M, D], broadcast over heads).
	PerHead bool
}

// Stream tags keep the draws of different tensors independent.
const (
	tagOmega = 1 + iota
	tagE
	tagF
	// tag 4 draws the inputs of the error sweep (cmd/internal/featsweep,
	// `linlab features-error`), which keeps its own copy of stream.
	_
)

// stream returns the PCG generator for one tensor: seed chooses the
// sequence family, and (tag, layer, head) one stream inside it.
func stream(seed uint64, tag, layer, head int) *rand.Rand {
	x := uint64(tag)<<56 ^ uint64(uint32(layer))<<24 ^ uint64(uint32(head))
	return rand.New(rand.NewPCG(seed, splitmix.Hash(x)))
}

// Omega samples the Performer random features for one layer: a float32
// tensor of shape [H, m, d] with opts.PerHead, else [1, m, d]. The result
// depends only on (seed, layer, heads, m, d, opts).
func Omega(seed uint64, layer, heads, m, d int, opts OmegaOptions) (*onnx.Tensor, error) {
	kind, norms := opts.Kind, opts.Norms
	if kind == "" {
		kind = Orthogonal
	}
	if norms == "" {
		norms = NormsChi
	}
	if kind != IID && kind != Orthogonal {
		return nil, fmt.Errorf("features: omega kind %q, want %q or %q", kind, Orthogonal, IID)
	}
	if norms != NormsChi && norms != NormsSqrtD && norms != NormsQMC {
		return nil, fmt.Errorf("features: omega norms %q, want %q, %q or %q", norms, NormsChi, NormsSqrtD, NormsQMC)
	}
	if m < 1 || d < 1 || layer < 0 || (opts.PerHead && heads < 1) {
		return nil, fmt.Errorf("features: omega needs m ≥ 1, d ≥ 1, layer ≥ 0 and heads ≥ 1, got m=%d d=%d layer=%d heads=%d", m, d, layer, heads)
	}
	if onnx.NumElements([]int{max(heads, 1), m, d}) < 0 || m*d > 1<<30 {
		return nil, fmt.Errorf("features: omega of %d×%d per head is too large", m, d)
	}
	nh := 1
	if opts.PerHead {
		nh = heads
	}
	out := make([]float32, 0, nh*m*d)
	for h := 0; h < nh; h++ {
		rng := stream(seed, tagOmega, layer, h)
		rows := directions(rng, kind, m, d)
		var r []float64
		switch norms {
		case NormsChi:
			if kind == IID {
				r = nil // Gaussian rows already have χ_D norms
			} else {
				r = make([]float64, m)
				for i := range r {
					var s float64
					for j := 0; j < d; j++ {
						g := rng.NormFloat64()
						s += g * g
					}
					r[i] = math.Sqrt(s)
				}
			}
		case NormsSqrtD:
			r = make([]float64, m)
			for i := range r {
				r[i] = math.Sqrt(float64(d))
			}
		case NormsQMC:
			r = ChiQuantiles(m, d)
			rng.Shuffle(m, func(i, j int) { r[i], r[j] = r[j], r[i] })
		}
		for i := 0; i < m; i++ {
			row := rows[i*d : (i+1)*d]
			f := 1.0
			if r != nil {
				f = r[i] / norm(row)
			}
			for _, x := range row {
				out = append(out, float32(x*f))
			}
		}
	}
	return onnx.NewFloat([]int{nh, m, d}, out), nil
}

// directions returns m rows of length d: Gaussian rows (iid) or blocks of
// orthonormal rows (orthogonal).
func directions(rng *rand.Rand, kind Kind, m, d int) []float64 {
	rows := make([]float64, m*d)
	if kind == IID {
		for i := range rows {
			rows[i] = rng.NormFloat64()
		}
		return rows
	}
	g := mat.NewDense(d, d, nil)
	var qr mat.QR
	var q, r mat.Dense
	for start := 0; start < m; start += d {
		for i := 0; i < d; i++ {
			for j := 0; j < d; j++ {
				g.Set(i, j, rng.NormFloat64())
			}
		}
		qr.Factorize(g)
		qr.QTo(&q)
		qr.RTo(&r)
		// Rows of the block are the columns of Q with the signs of diag(R)
		// applied, which makes the block Haar distributed.
		for i := 0; i < d && start+i < m; i++ {
			s := 1.0
			if r.At(i, i) < 0 {
				s = -1
			}
			for j := 0; j < d; j++ {
				rows[(start+i)*d+j] = s * q.At(j, i)
			}
		}
	}
	return rows
}

func norm(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

// ChiQuantiles returns the quantiles of the χ distribution with d degrees of
// freedom at i/(m+1), i = 1..m, in increasing order.
func ChiQuantiles(m, d int) []float64 {
	c := distuv.ChiSquared{K: float64(d)}
	out := make([]float64, m)
	for i := range out {
		out[i] = math.Sqrt(c.Quantile(float64(i+1) / float64(m+1)))
	}
	return out
}

// ProjOptions selects how the Linformer projections are shared.
//
//   - "none": E and F are different, and different for every head
//     (shape [H, k, N] each);
//   - "headwise" (the default): E and F are different, each shared by the
//     heads of the layer ([1, k, N]);
//   - "kv": one matrix serves as both E and F for all heads of the layer
//     (F is E: the converter references one initializer twice);
//   - "layerwise": one matrix serves as E and F for all heads of all
//     layers; it does not depend on the layer index, and the converter must
//     add it once and reference it from every layer.
type ProjOptions struct {
	Share Share
}

// Projection samples the Linformer projections for one layer: E and F of
// shape [H or 1, k, n] with N(0, 1/k) entries. With sharing "kv" or
// "layerwise", F is the same tensor as E. The result depends only on (seed,
// layer, heads, k, n, opts), and not on layer for "layerwise".
func Projection(seed uint64, layer, heads, k, n int, opts ProjOptions) (e, f *onnx.Tensor, err error) {
	share := opts.Share
	if share == "" {
		share = ShareHeadwise
	}
	if k < 1 || n < 1 || layer < 0 || heads < 1 {
		return nil, nil, fmt.Errorf("features: projection needs k ≥ 1, n ≥ 1, layer ≥ 0 and heads ≥ 1, got k=%d n=%d layer=%d heads=%d", k, n, layer, heads)
	}
	if k*n > 1<<30 {
		return nil, nil, fmt.Errorf("features: projection of %d×%d is too large", k, n)
	}
	sigma := 1 / math.Sqrt(float64(k))
	draw := func(tag, layer, nh int) *onnx.Tensor {
		d := make([]float32, 0, nh*k*n)
		for h := 0; h < nh; h++ {
			rng := stream(seed, tag, layer, h)
			for i := 0; i < k*n; i++ {
				d = append(d, float32(rng.NormFloat64()*sigma))
			}
		}
		return onnx.NewFloat([]int{nh, k, n}, d)
	}
	switch share {
	case ShareNone:
		if onnx.NumElements([]int{heads, k, n}) < 0 || heads*k*n > 1<<31 {
			return nil, nil, fmt.Errorf("features: projection of %d heads × %d×%d is too large", heads, k, n)
		}
		return draw(tagE, layer, heads), draw(tagF, layer, heads), nil
	case ShareHeadwise:
		return draw(tagE, layer, 1), draw(tagF, layer, 1), nil
	case ShareKV:
		e = draw(tagE, layer, 1)
		return e, e, nil
	case ShareLayerwise:
		e = draw(tagE, 0, 1)
		return e, e, nil
	}
	return nil, nil, fmt.Errorf("features: projection sharing %q, want %q, %q, %q or %q", share, ShareNone, ShareHeadwise, ShareKV, ShareLayerwise)
}
