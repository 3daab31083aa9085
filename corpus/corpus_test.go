package corpus

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRead reads seeded and edge inputs in every form: each case gives
// the documents read ("ID=text", "!" before a bad one) or an error's
// parts.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	file := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	folder := func(name string, files map[string]string) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for n, data := range files {
			if err := os.WriteFile(filepath.Join(d, n), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	lines := func(name, data string) func() (*Source, error) {
		p := file(name, data)
		return func() (*Source, error) { return Lines(p, Options{MaxDoc: 100, MaxTotal: 200}), nil }
	}
	jsonl := func(name, data string) func() (*Source, error) {
		p := file(name, data)
		return func() (*Source, error) { return JSONL(p, Options{MaxDoc: 100, MaxTotal: 200}), nil }
	}
	dirOf := func(name string, files map[string]string) func() (*Source, error) {
		d := folder(name, files)
		return func() (*Source, error) { return Dir(d, Options{MaxDoc: 100, MaxTotal: 200}) }
	}
	long := strings.Repeat("x", 101)
	for _, c := range []struct {
		name string
		src  func() (*Source, error)
		skip int64
		want string // the documents, or the error's parts separated by "|"
	}{
		{"lines: CRLF, blank lines, BOM", lines("crlf.txt", "\uFEFFfirst\r\n\r\n  \nsecond\r\nthird"), 0, "1=first 4=second 5=third"},
		{"lines: a CR inside a line is text", lines("cr.txt", "a\rb\r\n"), 0, "1=a\rb"},
		{"lines: invalid UTF-8", lines("latin1.txt", "ok\ncaf\xe9\n"), 0, "1=ok !2=caf\xe9"},
		{"lines: skip", lines("skip.txt", "a\n\nb\nc\n"), 2, "1= 3= 4=c"},
		{"lines: blank", lines("blank.txt", "\n \r\n"), 0, "err|blank.txt: no texts (one per line)"},
		{"lines: a line over the bound", lines("long.txt", "a\n"+long+"\n"), 0, "err|long.txt:2: line longer than 100 bytes"},
		{"lines: total over the bound", lines("total.txt", strings.Repeat(strings.Repeat("y", 60)+"\n", 4)), 0, "err|total.txt: longer than the bound on this input, 200 bytes|at line 4"},
		{"jsonl: CRLF, BOM, numbers", jsonl("crlf.jsonl", "\uFEFF{\"id\": \"a\", \"text\": \"x\"}\r\n\r\n{\"id\": 7, \"text\": \"y\"}\r\n"), 0, "a=x 7=y"},
		{"jsonl: skip", jsonl("skip.jsonl", `{"id": "a", "text": "x"}`+"\n"+`{"id": "b", "text": "y"}`+"\n"), 1, "a= b=y"},
		{"jsonl: invalid UTF-8", jsonl("latin1.jsonl", `{"id": "a", "text": "caf`+"\xe9"+`"}`), 0, "!a=caf\uFFFD"},
		{"jsonl: lone surrogate", jsonl("sur.jsonl", `{"id": "a", "text": "\ud83d\ude00"}`+"\n"+`{"id": "b", "text": "\udc00"}`), 0, "a=\U0001F600 !b=\uFFFD"},
		{"jsonl: duplicate id", jsonl("dup.jsonl", `{"id": "7", "text": "x"}`+"\n\n"+`{"id": 7, "text": "y"}`), 0, `err|dup.jsonl:3: id "7" was already used on line 1`},
		{"jsonl: two objects", jsonl("two.jsonl", `{"id": "a", "text": "x"} {}`), 0, "err|two.jsonl:1: byte 25:|exactly one object"},
		{"jsonl: no text", jsonl("notext.jsonl", `{"id": "a"}`), 0, `err|notext.jsonl:1: no "text" string`},
		{"jsonl: a line over the bound", jsonl("long.jsonl", `{"id": "a", "text": "`+long+`"}`), 0, "err|long.jsonl:1: line longer than 100 bytes"},
		{"jsonl: total over the bound", jsonl("total.jsonl", fmt.Sprintf("{\"id\": 1, \"text\": %[1]q}\n{\"id\": 2, \"text\": %[1]q}\n{\"id\": 3, \"text\": %[1]q}\n", long[:60])), 0, "err|total.jsonl: longer than the bound on this input, 200 bytes"},
		{"jsonl: empty", jsonl("empty.jsonl", "\n"), 0, "err|empty.jsonl: no documents"},
		{"dir: sorted, *.txt and *.md, BOM", dirOf("docs", map[string]string{"b.md": "B\r\n", "a.txt": "\uFEFFA", "c.pdf": "C", "d.TXT": "D"}), 0, "a.txt=A b.md=B\r\n d.TXT=D"},
		{"dir: skip", dirOf("skipdocs", map[string]string{"a.txt": "A", "b.txt": "B"}), 1, "a.txt= b.txt=B"},
		{"dir: invalid UTF-8", dirOf("latin1", map[string]string{"a.txt": "na\xefve"}), 0, "!a.txt=na\xefve"},
		{"dir: a file over the bound", dirOf("longdocs", map[string]string{"a.txt": long}), 0, "err|a.txt: larger than 100 bytes"},
		{"dir: total over the bound", dirOf("totaldocs", map[string]string{"a.txt": long[:90], "b.txt": long[:90], "c.txt": long[:90]}), 0,
			"err|totaldocs: more than 200 bytes of documents"},
		{"dir: no *.txt", dirOf("none", map[string]string{"a.pdf": "x"}), 0, "err|none: no *.txt or *.md files"},
		{"dir: absent", func() (*Source, error) { return Dir(filepath.Join(dir, "absent"), Options{}) }, 0, "err|absent"},
		{"texts", func() (*Source, error) { return Texts([]string{"a", " ", "\xff"}), nil }, 0, "text-1=a text-2=  !text-3=\xff"},
		{"open: a file", func() (*Source, error) { return Open(file("open.txt", "a\nb"), Options{}) }, 0, "1=a 2=b"},
		{"open: a folder", func() (*Source, error) { return Open(folder("opendir", map[string]string{"x.md": "X"}), Options{}) }, 0, "x.md=X"},
		{"open: absent", func() (*Source, error) { return Open(filepath.Join(dir, "absent.txt"), Options{}) }, 0, "err|absent.txt"},
	} {
		src, err := c.src()
		var got []string
		if err == nil {
			read := func(d Doc) error {
				s := d.ID + "=" + d.Text
				if d.Bad != "" {
					if !strings.HasPrefix(d.Bad, InvalidUTF8+": byte ") {
						t.Errorf("%s: %s: Bad %q", c.name, d.ID, d.Bad)
					}
					s = "!" + s
				}
				if d.Rec != int64(len(got)+1) {
					t.Errorf("%s: %s: Rec %d, want %d", c.name, d.ID, d.Rec, len(got)+1)
				}
				got = append(got, s)
				return nil
			}
			if c.skip > 0 {
				err = src.Each(c.skip, read)
			} else {
				var docs []Doc
				if docs, err = src.ReadAll(); err == nil {
					for _, d := range docs {
						read(d)
					}
				}
			}
		}
		if want, ok := strings.CutPrefix(c.want, "err|"); ok {
			for _, part := range strings.Split(want, "|") {
				if err == nil || !strings.Contains(err.Error(), part) || !strings.HasPrefix(err.Error(), "corpus: ") {
					t.Errorf("%s: err = %v, want corpus: … %q", c.name, err, part)
				}
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, strings.Join(got, " "), err, c.want)
		}
	}
}

// TestStreamsPastTheTotal: Each bounds each document, not the total.
func TestStreamsPastTheTotal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "many.txt")
	if err := os.WriteFile(p, []byte(strings.Repeat(strings.Repeat("w", 60)+"\n", 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	src := Lines(p, Options{MaxDoc: 100, MaxTotal: 200})
	n := 0
	if err := src.Each(0, func(Doc) error { n++; return nil }); err != nil || n != 10 {
		t.Errorf("Each: %d documents, %v; want 10", n, err)
	}
	if _, err := src.ReadAll(); err == nil {
		t.Error("ReadAll read 610 bytes past a bound of 200")
	}
}

// TestStdin: "-" is the standard input for Lines and JSONL.
func TestStdin(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		src  func() *Source
		data string
		want string
	}{
		{func() *Source { return Lines("-", Options{}) }, "a\r\nb\n", "1=a 2=b"},
		{func() *Source { return JSONL("-", Options{}) }, `{"id": "x", "text": "a"}` + "\n", "x=a"},
		{func() *Source { s, _ := Open("-", Options{}); return s }, "c\n", "1=c"},
	} {
		p := filepath.Join(dir, "stdin")
		if err := os.WriteFile(p, []byte(c.data), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		stdin := os.Stdin
		os.Stdin = f
		docs, err := c.src().ReadAll()
		os.Stdin = stdin
		f.Close()
		var got []string
		for _, d := range docs {
			got = append(got, d.ID+"="+d.Text)
		}
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("%q: %q, %v; want %q", c.data, got, err, c.want)
		}
	}
}

// TestStopsOnFnError: an error of fn ends the walk and comes back as it
// is, without the package's prefix.
func TestStopsOnFnError(t *testing.T) {
	stop := fmt.Errorf("stop")
	n := 0
	err := Texts([]string{"a", "b", "c"}).Each(0, func(Doc) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if err != stop || n != 2 {
		t.Errorf("err %v after %d documents; want stop after 2", err, n)
	}
}

// TestLoneSurrogate: an escaped surrogate in a JSON string that is not
// one half of a high-low pair is found at the offset of its backslash,
// whatever its case; pairs, other escapes, an escaped backslash before
// "u" and text outside strings are not.
func TestLoneSurrogate(t *testing.T) {
	for _, c := range []struct {
		line string
		want int
	}{
		{`{"id": "a", "text": "the man"}`, -1},
		{`{"id": "a", "text": "\ud83d\ude00 smile"}`, -1},
		{`{"id": "a", "text": "\uD83D\uDE00"}`, -1},
		{`{"id": "a", "text": "caf\u00e9 \u0041"}`, -1},
		{`{"id": "a", "text": "\\ud800 is not an escape"}`, -1},
		{`{"id": "a", "text": "\\\\\ud83d\ude00"}`, -1},
		{`{"id": "a", "text": "\"\ud800"}`, 23},
		{`{"id": "a", "text": "x\ud800"}`, 22},
		{`{"id": "a", "text": "x\uDBFF y"}`, 22},
		{`{"id": "a", "text": "\ud800\u0041"}`, 21},
		{`{"id": "a", "text": "\ud800\ud800\udc00"}`, 21},
		{`{"id": "a", "text": "\udc00"}`, 21},
		{`{"id": "a", "text": "\ud83d\ude00\ude00"}`, 33},
		{`{"id": "a", "text": "\\\ud800"}`, 23},
		{`{"id": "\ud800", "text": "the man"}`, 8},
	} {
		if got := loneSurrogate(c.line); got != c.want {
			t.Errorf("%s: %d, want %d", c.line, got, c.want)
		}
	}
}

// TestDuplicateIDs: a fingerprint seen before is confirmed against the
// ids themselves, by reading a regular file again or in the spool of
// stdin's ids; an id whose fingerprint matched another's is found on no
// earlier line.
func TestDuplicateIDs(t *testing.T) {
	in := filepath.Join(t.TempDir(), "docs.jsonl")
	lines := `{"id": "a", "text": "the man"}` + "\n" + `{"id": 7, "text": "horses"}` + "\n\n" +
		`{"id": "b", "text": "food"}` + "\n" + `{"id": "7", "text": "the food"}` + "\n"
	if err := os.WriteFile(in, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	file, spool := newIDCheck(in, DefaultMaxDoc), newIDCheck("-", DefaultMaxDoc)
	defer file.free()
	defer spool.free()
	if file.fps == nil || file.spool != nil || spool.fps == nil || spool.spool == nil {
		t.Fatalf("file check %+v, stdin check %+v", file, spool)
	}
	for i, id := range []string{"a", "7", "", "b"} {
		if id != "" {
			if prev, err := spool.add(id, i+1); prev != 0 || err != nil {
				t.Fatalf("spool: add(%q) = %d, %v", id, prev, err)
			}
		}
	}
	for _, c := range []*idCheck{file, spool} {
		for _, k := range []struct {
			id         string
			before, at int
		}{{"a", 5, 1}, {"7", 5, 2}, {"b", 5, 4}, {"c", 6, 0}} {
			if got, err := c.lineOf(k.id, k.before); err != nil || got != k.at {
				t.Errorf("spool %v: lineOf(%q, %d) = %d, %v; want %d", c.spool != nil, k.id, k.before, got, err, k.at)
			}
		}
	}
	if got, _ := file.lineOf("b", 4); got != 0 {
		t.Errorf("file: lineOf(b, 4) = %d, want 0 (b is on line 4)", got)
	}
	if prev, err := spool.add("b", 9); prev != 4 || err != nil {
		t.Errorf("spool: add(b) again = %d, %v; want line 4", prev, err)
	}
}

// TestBoundsFollowMemory: a line over the bound names the file, the
// line and the bound (bufio's "token too long" named neither); an
// endless input is refused at half the memory the process may use.
func TestBoundsFollowMemory(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	t.Setenv("GOMEMLIMIT", "16MiB")
	// /dev/zero is one endless line: the line bound stops it.
	if _, err := Lines("/dev/zero", Options{}).ReadAll(); err == nil || !strings.Contains(err.Error(), "/dev/zero: longer than the bound on this input, 8388608 bytes, half the memory") {
		t.Errorf("/dev/zero: %v", err)
	}
	// Lines of a kilobyte each, endlessly: the total bound (half of the
	// 16 MiB memory limit) stops them.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		line := []byte(strings.Repeat("y", 1000) + "\n")
		for {
			if _, err := pw.Write(line); err != nil {
				return
			}
		}
	}()
	defer pw.Close()
	defer pr.Close()
	if _, err := Lines("/dev/fd/"+strconv.Itoa(int(pr.Fd())), Options{}).ReadAll(); err == nil || !strings.Contains(err.Error(), "8388608 bytes, half the memory") {
		t.Errorf("endless lines: %v", err)
	}
}
