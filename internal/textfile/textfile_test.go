package textfile

import (
	"os"
	"path/filepath"
	"reflect"
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
