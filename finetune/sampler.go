package finetune

import (
	"math/rand/v2"
	"slices"
)

// This file holds the samplers of calibration rows: the seeded
// mini-batches of the projection fits (minibatch) and of Transfer's heads
// (pick), and the evenly spaced rows a check evaluates (spread).

// minibatch draws k distinct rows of n in increasing order (all when k is
// 0 or ≥ n).
func minibatch(rng *rand.Rand, n, k int) []int {
	if k <= 0 || k >= n {
		return nil
	}
	perm := rng.Perm(n)[:k]
	slices.Sort(perm) // distinct rows: any sort gives this order
	return perm
}

// pick draws k distinct rows of rows (all when k ≤ 0 or ≥ len(rows)).
func pick(rng *rand.Rand, rows []int, k int) []int {
	if k <= 0 || k >= len(rows) {
		return rows
	}
	perm := rng.Perm(len(rows))[:k]
	out := make([]int, k)
	for i, p := range perm {
		out[i] = rows[p]
	}
	return out
}

// spread returns at most k of rows, evenly spaced (all when k ≤ 0).
func spread(rows []int, k int) []int {
	if k <= 0 || len(rows) <= k {
		return rows
	}
	out := make([]int, k)
	for i := range out {
		out[i] = rows[i*len(rows)/k]
	}
	return out
}

// allRows returns rows, or every batch row 0..n-1 when rows is nil.
func allRows(rows []int, n int) []int {
	if rows != nil {
		return rows
	}
	rows = make([]int, n)
	for i := range rows {
		rows[i] = i
	}
	return rows
}
