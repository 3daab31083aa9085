// Package featsweep is the harness of `linlab features-error`: it
// measures how well the Performer estimator (the float32 Go kernel of
// ops.PerformerAttention with ω from features.Omega) approximates exact
// softmax attention, computed in float64, as the feature count M grows,
// for each ω kind and row-norm choice, and prints the table with the
// log-log slope of the error against M (about −1/2).
package featsweep
