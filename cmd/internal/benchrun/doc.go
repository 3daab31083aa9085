// Package benchrun runs the long-input benchmark of `convert bench`: it
// prepares the model variants (Variants, built on convert's public
// conversions), checks the baseline models given beside them
// (ParseBaseline, LoadBaselines, BaselineKind), runs every (variant,
// length) in its own child process (a re-exec of the running binary) so
// that peak memory is clean, interleaves the variants round by round, and
// collects median times, peak RSS and the cost model's predictions in a
// Result. TimeRuns times sessions in this process, in turn (`linlab
// bench-backends`).
package benchrun
