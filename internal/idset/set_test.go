package idset

import (
	"fmt"
	"runtime"
	"testing"
)

// TestSet: every new id is reported new and every repeat seen, across
// the table's growth.
func TestSet(t *testing.T) {
	var s Set
	const n = 100_000
	for i := range n {
		if s.Add(fmt.Sprint("id-", i)) {
			t.Fatalf("id-%d reported seen on its first add", i)
		}
	}
	for i := range n {
		if !s.Add(fmt.Sprint("id-", i)) {
			t.Fatalf("id-%d reported new on its second add", i)
		}
	}
	if s.Len() != n || len(s.t.slots) != 1<<18 {
		t.Errorf("%d ids in %d slots, want %d in %d", s.Len(), len(s.t.slots), n, 1<<18)
	}
	s.Free()
	if s.Len() != 0 || s.Add("id-1") {
		t.Error("after Free the set is not empty")
	}
}

// TestSetCopy: a copy of a set keeps its table when the original is
// dropped and collected.
func TestSetCopy(t *testing.T) {
	s := new(Set)
	for i := range 5000 {
		s.Add(fmt.Sprint(i))
	}
	c := *s
	s = nil
	for range 3 {
		runtime.GC()
	}
	for i := range 5000 {
		if !c.Add(fmt.Sprint(i)) {
			t.Fatalf("%d lost", i)
		}
	}
	runtime.KeepAlive(s)
}
