package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// LibraryEnv is the environment variable that overrides where the
// onnxruntime shared library is found.
const LibraryEnv = "ONNXRUNTIME_SHARED_LIBRARY_PATH"

// libraryRel is where scripts/setup.sh installs the library, relative to the
// repository root.
var libraryRel = filepath.Join(".tools", "lib", "libonnxruntime.so.1")

// LibraryPath returns the path of the onnxruntime shared library: the file
// named by $ONNXRUNTIME_SHARED_LIBRARY_PATH if set, else
// .tools/lib/libonnxruntime.so.1 under the repository root (found by walking
// up from the working directory and from the executable's directory to a
// folder holding go.mod and .tools). The error names scripts/setup.sh.
func LibraryPath() (string, error) {
	if p := os.Getenv(LibraryEnv); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return "", fmt.Errorf("runtime: %s=%s is not a file; unset it or run scripts/setup.sh", LibraryEnv, p)
		}
		return p, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		if root, ok := findRepoRoot(s); ok {
			p := filepath.Join(root, libraryRel)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p, nil
			}
		}
	}
	return "", errors.New("runtime: onnxruntime library not found: run scripts/setup.sh (installs .tools/lib/libonnxruntime.so.1) or set " + LibraryEnv)
}

// findRepoRoot walks up from dir to the first folder that holds both go.mod
// and .tools.
func findRepoRoot(dir string) (string, bool) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	for {
		if isFile(filepath.Join(dir, "go.mod")) && isDir(filepath.Join(dir, ".tools")) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func isFile(p string) bool { st, err := os.Stat(p); return err == nil && !st.IsDir() }
func isDir(p string) bool  { st, err := os.Stat(p); return err == nil && st.IsDir() }

var (
	ortOnce sync.Once
	ortErr  error
)

// initORT loads the shared library and creates the onnxruntime environment,
// once per process. onnxruntime's own log goes quiet (fatal only): every
// failure reaches the caller as an error value instead.
func initORT() error {
	ortOnce.Do(func() {
		p, err := LibraryPath()
		if err != nil {
			ortErr = err
			return
		}
		ort.SetSharedLibraryPath(p)
		if err := ort.InitializeEnvironment(ort.WithLogLevelFatal()); err != nil {
			ortErr = fmt.Errorf("runtime: loading onnxruntime from %s: %v (reinstall with scripts/setup.sh)", p, err)
		}
	})
	return ortErr
}

// ORTAvailable reports whether the onnxruntime library can be loaded; the
// error says how to install it. Tests that need onnxruntime skip with its
// message.
func ORTAvailable() error { return initORT() }
