// Package progress reports the steps of long work on an io.Writer (a
// command's stderr), one line per finished step: its number out of the
// total, what it did, the time elapsed and an estimate of the time left,
//
//	finetune: layer 3/6: PerformerAttention block 2 (attn_2): rel err 0.4120 → 0.1184 (1m02s elapsed, ETA 1m02s)
//
// It is the one progress interface of the module: finetune.Options.Progress
// and the harnesses under cmd/internal/ (the report-real table, the
// features error sweep, the benchmark runner) all take an io.Writer and report
// through a Reporter, so that every command's progress reads the same way.
// A nil writer gives a nil Reporter, whose methods do nothing.
package progress
