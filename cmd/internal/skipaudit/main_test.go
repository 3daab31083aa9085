package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestAudit(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: onnxruntime not available (install it with scripts/setup.sh)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestB"}`,
		`{"Action":"skip","Package":"p","Test":"TestTorch"}`,
		`{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}`,
		`{"Action":"skip","Package":"q"}`,
	}, "\n")
	for _, c := range []struct {
		name  string
		allow []string
		code  int
		want  []string
	}{
		{"unexpected skip fails", []string{"p/TestTorch"}, 1, []string{"SKIPPED p/TestB: b_test.go:9: onnxruntime not available", "1 tests passed, 0 failed, 1 skipped without an allow-list entry, 1 skips allowed", "ok  \tp"}},
		{"all skips allowed", []string{"p/Test(B|Torch)"}, 0, []string{"1 tests passed, 0 failed, 0 skipped without an allow-list entry, 2 skips allowed"}},
	} {
		var re []*regexp.Regexp
		for _, a := range c.allow {
			re = append(re, regexp.MustCompile("^(?:"+a+")$"))
		}
		var out bytes.Buffer
		if code := audit(strings.NewReader(stream), &out, re); code != c.code {
			t.Errorf("%s: exit %d, want %d\n%s", c.name, code, c.code, out.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", c.name, w, out.String())
			}
		}
	}
	var out bytes.Buffer
	failing := `{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: boom\n"}` + "\n" + `{"Action":"fail","Package":"p","Test":"TestC"}`
	if code := audit(strings.NewReader(failing), &out, nil); code != 1 || !strings.Contains(out.String(), "FAILED  p/TestC: c_test.go:3: boom") {
		t.Errorf("failing test: exit %d\n%s", code, out.String())
	}
}
