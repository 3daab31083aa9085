package cliutil

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestInts(t *testing.T) {
	pos := IntList{Min: 1}
	idx := IntList{Min: 0, Max: 1 << 16, Ranges: true, Empty: true}
	cases := []struct {
		flag, value string
		l           IntList
		want        string // fmt.Sprint of the result, or the error's text
	}{
		{"lengths", "512,1024,4K", pos, "[512 1024 4096]"},
		{"seq-lens", "4K", pos, "[4096]"},
		{"seq-lens", " 128 , 2k ,, ", pos, "[128 2048]"},
		{"lengths", "1M", pos, "[1048576]"},
		{"lengths", "2047M", pos, "[2146435072]"},
		{"layers", "0-3,7", idx, "[0 1 2 3 7]"},
		{"layers", "5", idx, "[5]"},
		{"layers", "2-2", idx, "[2]"},
		{"layers", "", idx, "[]"},
		{"layers", "1K-1K", idx, "[1024]"},
		{"k", "32,64", IntList{Min: 1, Empty: true}, "[32 64]"},

		{"seq-lens", "128,x", pos, `--seq-lens "x": want positive integers such as 512,4K, separated by commas`},
		{"seq-lens", "4X", pos, `--seq-lens "4X": want positive`},
		{"lengths", "0", pos, `--lengths "0": 0 is out of bounds (want positive integers`},
		{"lengths", "-5", pos, `--lengths "-5": -5 is out of bounds`},
		{"lengths", "", pos, `--lengths "": no items`},
		{"lengths", " , ", pos, `--lengths " , ": no items`},
		{"lengths", "2048M", pos, `--lengths "2048M": want`},
		{"lengths", "99999999999999999999", pos, `--lengths "99999999999999999999": want`},
		{"lengths", "1-3", pos, `--lengths "1-3": want`}, // no ranges here
		{"lengths", "1.5K", pos, `--lengths "1.5K": want`},
		{"layers", "3-1", idx, `--layers "3-1": range 3-1 is empty`},
		{"layers", "a", idx, `--layers "a": want integers in 0..65536 such as 512,4K or ranges LO-HI`},
		{"layers", "0-", idx, `--layers "0-": want`},
		{"layers", "-1", idx, `--layers "-1": -1 is out of bounds (want integers in 0..65536`},
		{"layers", "0-50000000", idx, `--layers "0-50000000": 50000000 is out of bounds`},
		{"layers", "0-40000,0-40000", idx, `--layers "0-40000": more than 65536 items`},
		{"seq-len", "1,2,3", IntList{Min: 1, MaxItems: 2}, `--seq-len "3": more than 2 items`},
		{"features", "4097", IntList{Min: 1, Max: 4096}, `--features "4097": 4097 is out of bounds (want integers in 1..4096`},
	}
	for _, c := range cases {
		got, err := Ints(c.flag, c.value, c.l)
		var s string
		if err != nil {
			s = err.Error()
			var fe *FlagError
			if !errors.As(err, &fe) || fe.Flag != c.flag {
				t.Errorf("%s %q: error %v is not a FlagError for the flag", c.flag, c.value, err)
			}
			if !strings.HasPrefix(s, "--"+c.flag+" ") {
				t.Errorf("%s %q: error %q does not start with the flag", c.flag, c.value, s)
			}
		} else {
			s = fmt.Sprint(got)
			if got == nil {
				s = "[]"
			}
		}
		if !strings.HasPrefix(s, c.want) {
			t.Errorf("%s %q: got %q, want prefix %q", c.flag, c.value, s, c.want)
		}
	}
}

// TestIntsBoundsBeforeExpanding: a huge range is refused without being
// expanded (it would take gigabytes).
func TestIntsBoundsBeforeExpanding(t *testing.T) {
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := Ints("layers", "0-2000M", IntList{Max: math.MaxInt32, Ranges: true}); err == nil {
			t.Fatal("no error")
		}
	})
	if allocs > 10 {
		t.Errorf("%v allocations", allocs)
	}
}

func TestStrings(t *testing.T) {
	for in, want := range map[string]string{
		"":               "[]",
		" a, b ,,c ":     "[a b c]",
		"chi,sqrt-d,qmc": "[chi sqrt-d qmc]",
	} {
		if got := fmt.Sprint(Strings(in)); got != want {
			t.Errorf("Strings(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestInt(t *testing.T) {
	cases := []struct {
		value    string
		min, max int
		want     string
	}{
		{"16", 1, 0, "16"},
		{"4K", 1, 0, "4096"},
		{" 2m ", 1, 0, "2097152"},
		{"2", 2, 0, "2"},
		{"0", 1, 0, `--seq-len "0": want an integer ≥ 1 such as 512 or 4K`},
		{"1", 2, 0, `--seq-len "1": want an integer ≥ 2`},
		{"x", 1, 0, `--seq-len "x": want an integer ≥ 1`},
		{"", 1, 0, `--seq-len "": want`},
		{"1,2", 1, 0, `--seq-len "1,2": want`},
		{"11", 0, 10, `--seq-len "11": want an integer in 0..10`},
	}
	for _, c := range cases {
		n, err := Int("seq-len", c.value, c.min, c.max)
		got := fmt.Sprint(n)
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("Int(%q, %d, %d) = %q, want prefix %q", c.value, c.min, c.max, got, c.want)
		}
	}
}
