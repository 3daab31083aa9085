package embed

import (
	"crypto/sha256"
	"encoding/binary"
)

// IDSet remembers ids by an 8-byte fingerprint (the first 8 bytes of the
// id's SHA-256) in an open-addressing table at most 3/4 full: 11 to 21
// bytes per id, against the 36 to 53 of a Go map of 16-byte keys. Two
// ids may share a fingerprint (about n²/2⁶⁵ for n ids: once in 10⁵ runs
// of 17 million), so Add reports only that an id may have been added
// before; a caller that must be exact confirms against the ids
// themselves, which it can read again (VerifyParts reads the parts,
// embed's JSONL reader the file).
type IDSet struct {
	slots []uint64 // 0: empty
	n     int
}

// Add adds id and reports whether an id with its fingerprint was added
// before (then the set is unchanged).
func (s *IDSet) Add(id string) (maybeSeen bool) {
	h := sha256.Sum256([]byte(id))
	fp := binary.LittleEndian.Uint64(h[:8])
	if fp == 0 {
		fp = 1
	}
	if 4*(s.n+1) > 3*len(s.slots) {
		s.grow()
	}
	if !s.insert(fp) {
		return true
	}
	s.n++
	return false
}

// Len is the number of fingerprints in the set.
func (s *IDSet) Len() int { return s.n }

// insert puts fp in its slot (linear probing) unless it is there
// already, and reports whether it put it.
func (s *IDSet) insert(fp uint64) bool {
	mask := uint64(len(s.slots) - 1)
	for i := fp & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case 0:
			s.slots[i] = fp
			return true
		case fp:
			return false
		}
	}
}

// grow doubles the table (1024 slots at first).
func (s *IDSet) grow() {
	old := s.slots
	s.slots = make([]uint64, max(1024, 2*len(old)))
	for _, fp := range old {
		if fp != 0 {
			s.insert(fp)
		}
	}
}
