// Command skipaudit reads the event stream of `go test -json` on standard
// input and fails when a test skipped that is not on the allow list, so
// that CI cannot pass by skipping: a tier whose component (onnxruntime,
// the real model, the corpus beside the clone, protoc, the ONNX test data)
// is missing makes its tests skip on a developer's machine, but in CI every
// such component is installed and a skip means something is broken.
//
//	go test -json ./... | go run ./cmd/internal/skipaudit -allow .ci/allowed-skips
//
// The allow file lists one Go regular expression per line, matched against
// "package/TestName" (blank lines and lines starting with # are ignored);
// each entry should say in a comment why the skip is acceptable in CI.
// skipaudit prints a one-line summary per package and, at the end, the
// failing and the unexpectedly skipped tests with their last output line.
// It exits 1 when a test failed, a package failed to build, or a test
// skipped without being allowed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	allowPath := flag.String("allow", "", "file of regular expressions (package/TestName) whose skips are accepted")
	flag.Parse()
	var allow []*regexp.Regexp
	if *allowPath != "" {
		data, err := os.ReadFile(*allowPath)
		if err != nil {
			fmt.Fprintf(os.Stderr, "skipaudit: %v\n", err)
			os.Exit(2)
		}
		for i, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if j := strings.Index(line, " #"); j >= 0 {
				line = strings.TrimSpace(line[:j])
			}
			re, err := regexp.Compile("^(?:" + line + ")$")
			if err != nil {
				fmt.Fprintf(os.Stderr, "skipaudit: %s:%d: %v\n", *allowPath, i+1, err)
				os.Exit(2)
			}
			allow = append(allow, re)
		}
	}
	code := audit(os.Stdin, os.Stdout, allow)
	os.Exit(code)
}

func audit(r io.Reader, w io.Writer, allow []*regexp.Regexp) int {
	last := map[string]string{} // package/test -> last output line
	var failed, skipped, allowed []string
	var passed int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Build errors and other plain lines pass through.
			fmt.Fprintln(w, string(line))
			continue
		}
		key := e.Package
		if e.Test != "" {
			key += "/" + e.Test
		}
		switch e.Action {
		case "output":
			if s := strings.TrimSpace(e.Output); s != "" && !strings.HasPrefix(s, "===") && !strings.HasPrefix(s, "---") {
				last[key] = s
			}
			if e.Test == "" && (strings.HasPrefix(e.Output, "ok") || strings.HasPrefix(e.Output, "FAIL") || strings.HasPrefix(e.Output, "?")) {
				fmt.Fprint(w, e.Output)
			}
		case "pass":
			if e.Test != "" {
				passed++
			}
		case "fail":
			if e.Test != "" || last[key] != "" {
				failed = append(failed, key)
			}
		case "skip":
			if e.Test == "" {
				continue // a package without tests
			}
			ok := false
			for _, re := range allow {
				if re.MatchString(key) {
					ok = true
					break
				}
			}
			if ok {
				allowed = append(allowed, key)
			} else {
				skipped = append(skipped, key)
			}
		}
	}
	sort.Strings(failed)
	sort.Strings(skipped)
	for _, k := range failed {
		fmt.Fprintf(w, "FAILED  %s: %s\n", k, last[k])
	}
	for _, k := range skipped {
		fmt.Fprintf(w, "SKIPPED %s: %s\n", k, last[k])
	}
	fmt.Fprintf(w, "skipaudit: %d tests passed, %d failed, %d skipped without an allow-list entry, %d skips allowed\n", passed, len(failed), len(skipped), len(allowed))
	if len(failed) > 0 || len(skipped) > 0 {
		return 1
	}
	return 0
}
