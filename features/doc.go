// Package features samples the frozen random parameters that linear
// attention needs: the Performer's random features ω and the Linformer's
// projections E and F.
//
// Every tensor is a deterministic function of a seed and a layer index
// (math/rand/v2 PCG streams), so converting a model twice with the same seed
// gives byte-identical files, and each layer gets its own independent draw.
//
// Omega returns ω of shape [1 or H, M, D] for ops.PerformerAttention:
//
//   - Kind "iid": rows are independent N(0, I_D) vectors;
//   - Kind "orthogonal": ⌊M/D⌋ blocks of D exactly orthogonal rows, each
//     block the orthogonal factor of the QR decomposition of a Gaussian
//     D×D matrix (sign-corrected, so Haar distributed), plus a partial
//     block for the remaining M mod D rows;
//
// and then sets the row norms:
//
//   - Norms "chi": independent χ_D samples (the norm of a Gaussian vector,
//     so iid/chi rows are plain Gaussian vectors);
//   - Norms "sqrt-d": every row has norm √D;
//   - Norms "qmc": the χ_D quantiles at i/(M+1), i = 1..M, randomly
//     permuted over rows: the deterministic, stratified choice of norms
//     proposed by the seed article.
//
// Projection returns the Linformer projections E and F of shape
// [1 or H, k, N], scaled Gaussian N(0, 1/k) entries (a Johnson–Lindenstrauss
// map, so E·K preserves norms on average).
//
// Moments and FitBalance fit the frozen parameters of the Performer
// variants from calibration statistics of a layer's queries and keys (see
// balance.go): the per-head linear balance T (queries ·T, keys ·T⁻ᵀ, exact),
// the closed-form minimiser of the mean ‖x + y‖² over query–key pairs (the
// matrix geometric mean of their second moments, then the rotation that
// diagonalises the pair moment), and FAVOR#'s per-coordinate DERF
// parameters in that basis.
package features
