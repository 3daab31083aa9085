// Package realtable is the harness of `linlab report-real`: it converts a
// model with each of a list of variants (Performer, Linformer,
// local+pooled, LARA; zero-shot or fine-tuned with finetune.Fit), measures
// every variant against the original on held-out inputs (mean-pooled
// embedding cosine, per-layer attention error, the validate check), and
// renders the rows as markdown tables, at one sequence length (Table) or
// at several (ByLength, LengthMarkdown).
//
// It is built on the public API of convert, finetune and infer only;
// progress goes through internal/progress.
package realtable
