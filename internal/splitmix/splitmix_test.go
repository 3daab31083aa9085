package splitmix

import "testing"

// TestHashReference: Hash draws the reference generator's numbers
// (splitmix64.c's next()): the first five for seed 1234567, as Rosetta
// Code's "Pseudo-random numbers/Splitmix64" task lists them, and the
// first for seed 0. The streams of features and of featsweep's tables
// follow from these.
func TestHashReference(t *testing.T) {
	const gamma = 0x9e3779b97f4a7c15
	want := []uint64{
		6457827717110365317,
		3203168211198807973,
		9817491932198370423,
		4593380528125082431,
		16408922859458223821,
	}
	for n, w := range want {
		if got := Hash(1234567 + uint64(n)*gamma); got != w {
			t.Errorf("draw %d of seed 1234567: got %d, want %d", n, got, w)
		}
	}
	if got, w := Hash(0), uint64(0xe220a8397b1dcdaf); got != w {
		t.Errorf("first draw of seed 0: got %#x, want %#x", got, w)
	}
}
