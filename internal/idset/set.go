package idset

import (
	"crypto/sha256"
	"encoding/binary"
	"runtime"
)

// Set remembers ids by an 8-byte fingerprint (the first 8 bytes of the
// id's SHA-256) in an open-addressing table at most 3/4 full: 11 to 21
// bytes per id, against the 36 to 53 of a Go map of 16-byte keys. Where
// the platform allows (Linux, macOS, FreeBSD), the table is memory mapped
// apart from Go's heap: it holds no pointers, and on the heap it would
// let the garbage collector leave as much garbage again before it runs,
// doubling its cost in memory; it is unmapped when it grows (and by
// Free).
//
// Two ids may share a fingerprint (about n²/2⁶⁵ for n ids: once in 10⁵
// runs of 17 million), so Add reports only that an id may have been
// added before; a caller that must be exact confirms against the ids
// themselves, which it can read again (embed.VerifyParts reads the
// parts, corpus's JSONL reader the file or its spool of ids).
type Set struct {
	t *idTable
	n int
}

// idTable is a Set's table and what frees it: when it is released,
// or when it is no longer reachable (the Set and every copy of it
// dropped).
type idTable struct {
	slots []uint64 // 0: empty
	free  *freer
}

// freer frees a table's memory once.
type freer struct{ f func() }

func (f *freer) run() {
	if f.f != nil {
		f.f()
		f.f = nil
	}
}

// Add adds id and reports whether an id with its fingerprint was added
// before (then the set is unchanged).
func (s *Set) Add(id string) (maybeSeen bool) {
	h := sha256.Sum256([]byte(id))
	fp := binary.LittleEndian.Uint64(h[:8])
	if fp == 0 {
		fp = 1
	}
	if s.t == nil || 4*(s.n+1) > 3*len(s.t.slots) {
		s.grow()
	}
	if !s.t.insert(fp) {
		return true
	}
	s.n++
	return false
}

// Len is the number of fingerprints in the set.
func (s *Set) Len() int { return s.n }

// Free empties the set and releases its table at once (else the garbage
// collector releases it once the set is unreachable).
func (s *Set) Free() {
	if s.t != nil {
		s.t.release()
	}
	s.t, s.n = nil, 0
}

// insert puts fp in its slot (linear probing) unless it is there
// already, and reports whether it put it.
func (t *idTable) insert(fp uint64) bool {
	mask := uint64(len(t.slots) - 1)
	for i := fp & mask; ; i = (i + 1) & mask {
		switch t.slots[i] {
		case 0:
			t.slots[i] = fp
			return true
		case fp:
			return false
		}
	}
}

// release frees the table's memory.
func (t *idTable) release() {
	if t.free != nil {
		t.free.run()
	}
	t.slots = nil
}

// grow doubles the table (1024 slots at first).
func (s *Set) grow() {
	n := 1024
	if s.t != nil {
		n = 2 * len(s.t.slots)
	}
	slots, free := allocSlots(n)
	t := &idTable{slots: slots}
	if free != nil {
		t.free = &freer{free}
		runtime.AddCleanup(t, (*freer).run, t.free)
	}
	if old := s.t; old != nil {
		for _, fp := range old.slots {
			if fp != 0 {
				t.insert(fp)
			}
		}
		old.release()
	}
	s.t = t
}
