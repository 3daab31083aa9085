package infer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindLibrary checks the search order of LibraryPath on a fake layout:
// explicit path, beside the executable, the repository's .tools, then
// $LD_LIBRARY_PATH; and that the error lists what was tried.
func TestFindLibrary(t *testing.T) {
	name := libraryName()
	root := t.TempDir()
	mk := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	repo := filepath.Join(root, "repo")
	mk(filepath.Join(repo, "go.mod"))
	repoLib := mk(filepath.Join(repo, ".tools", "lib", name))
	wd := filepath.Join(repo, "cmd", "x")
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "opt", "bin")
	exe := mk(filepath.Join(bin, "convert"))
	ld := filepath.Join(root, "ld")
	env := func(vals map[string]string) func(string) string { return func(k string) string { return vals[k] } }

	explicit := mk(filepath.Join(root, "explicit", name))
	for _, c := range []struct {
		name     string
		override string
		env      map[string]string
		exe, wd  string
		setup    func()
		want     string
		wantErr  string
	}{
		{name: "override wins", override: explicit, env: map[string]string{LibraryEnv: "/nonexistent"}, exe: exe, wd: wd, want: explicit},
		{name: "environment", env: map[string]string{LibraryEnv: explicit}, exe: exe, wd: wd, want: explicit},
		{name: "environment naming no file", env: map[string]string{LibraryEnv: filepath.Join(root, "missing.so")}, exe: exe, wd: wd, wantErr: "is not a file"},
		{name: "repository .tools from the working directory", env: map[string]string{}, exe: exe, wd: wd, want: repoLib},
		{name: "beside the executable first", env: map[string]string{}, exe: exe, wd: wd, setup: func() { mk(filepath.Join(bin, "..", "lib", name)) }, want: filepath.Join(bin, "..", "lib", name)},
		{name: "LD_LIBRARY_PATH", env: map[string]string{"LD_LIBRARY_PATH": "/nonexistent:" + ld}, exe: filepath.Join(root, "elsewhere", "convert"), wd: root, setup: func() { mk(filepath.Join(ld, name)) }, want: filepath.Join(ld, name)},
	} {
		if c.setup != nil {
			c.setup()
		}
		got, err := findLibrary(c.override, env(c.env), c.exe, c.wd)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: got %q, %v; want an error containing %q", c.name, got, err, c.wantErr)
			}
		case err != nil || got != c.want:
			t.Errorf("%s: got %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	// Nothing anywhere: the error lists the places tried.
	got, err := findLibrary("", env(map[string]string{"LD_LIBRARY_PATH": filepath.Join(root, "empty")}), filepath.Join(root, "nowhere", "convert"), root)
	if err == nil && !strings.HasPrefix(got, root) {
		t.Logf("this system has the library at %s, so the not-found error is not checked here", got)
		return
	}
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "nowhere", name)) || !strings.Contains(err.Error(), filepath.Join(root, "empty", name)) || !strings.Contains(err.Error(), "scripts/setup.sh") {
		t.Errorf("not found: error %v, want the tried paths and how to install", err)
	}
}
