package textfile

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "texts.txt")
	os.WriteFile(p, []byte("first line\r\n\n  \nsecond line\n"), 0o644)
	texts, err := Read(p)
	if err != nil || !reflect.DeepEqual(texts, []string{"first line", "second line"}) {
		t.Errorf("Read = %q, %v", texts, err)
	}
	os.WriteFile(p, []byte("\n\n"), 0o644)
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("blank file: err = %v", err)
	}
	if _, err := Read(filepath.Join(dir, "absent.txt")); err == nil || !strings.Contains(err.Error(), "absent.txt") {
		t.Errorf("absent file: err = %v", err)
	}
}

// TestReadBounds: a line over MaxLine names the file, the line and the
// bound (bufio's "token too long" named neither); a file past its bound
// in all is refused naming it.
func TestReadBounds(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "long.txt")
	os.WriteFile(p, []byte("one\ntwo\n"+strings.Repeat("x", MaxLine+1)+"\n"), 0o644)
	_, err := Read(p)
	if err == nil || !strings.Contains(err.Error(), p+":3:") || !strings.Contains(err.Error(), "1048576 bytes") || strings.Contains(err.Error(), "token too long") {
		t.Errorf("a line of %d bytes: err = %v, want the file, line 3 and the bound", MaxLine+1, err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		t.Setenv("GOMEMLIMIT", "16MiB")
		// /dev/zero is one endless line: the line bound stops it.
		if _, err := Read("/dev/zero"); err == nil || !strings.Contains(err.Error(), "/dev/zero:1:") {
			t.Errorf("/dev/zero: %v", err)
		}
		// Lines of a megabyte each, endlessly: the file's bound (half of
		// the 16 MiB memory limit) stops them.
		pr, pw, _ := os.Pipe()
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
		if _, err := Read("/dev/fd/" + strconv.Itoa(int(pr.Fd()))); err == nil || !strings.Contains(err.Error(), "8388608 bytes, half the memory") {
			t.Errorf("endless lines: %v", err)
		}
	}
}
