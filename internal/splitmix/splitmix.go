// Package splitmix is the output function of SplitMix64 (Steele, Lea and
// Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014;
// Vigna's splitmix64.c), used as a hash that spreads small keys over 64
// bits: features derives the PCG stream of each tensor it draws from a
// (tag, layer, head) key with it, and cmd/internal/featsweep the stream
// of its sweep.
package splitmix

// Hash returns the number the SplitMix64 generator seeded with x draws
// first: x advanced by the generator's increment (the golden ratio in
// 64-bit fixed point), then mixed. The generator's n-th draw (from 0) is
// Hash(x + n·0x9e3779b97f4a7c15).
func Hash(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
