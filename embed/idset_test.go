package embed

import (
	"fmt"
	"testing"
)

// TestIDSet: every new id is reported new and every repeat seen, across
// the table's growth.
func TestIDSet(t *testing.T) {
	var s IDSet
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
	if s.Len() != n || len(s.slots) != 1<<18 {
		t.Errorf("%d ids in %d slots, want %d in %d", s.Len(), len(s.slots), n, 1<<18)
	}
}
