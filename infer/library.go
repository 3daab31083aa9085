package infer

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// LibraryEnv is the environment variable that overrides where the
// onnxruntime shared library is found.
const LibraryEnv = "ONNXRUNTIME_SHARED_LIBRARY_PATH"

// libraryRel is where scripts/setup.sh installs the library, relative to the
// repository root.
var libraryRel = filepath.Join(".tools", "lib", libraryName())

// libraryName is the onnxruntime shared library's file name on this system.
func libraryName() string {
	switch runtime.GOOS {
	case "darwin":
		return "libonnxruntime.dylib"
	case "windows":
		return "onnxruntime.dll"
	}
	return "libonnxruntime.so.1"
}

var (
	libMu       sync.Mutex
	libOverride string
)

// SetLibraryPath makes LibraryPath return path (a command-line flag such as
// convert's --ort-lib calls it before the first session); "" restores the
// search. It has no effect once onnxruntime is loaded.
func SetLibraryPath(path string) {
	libMu.Lock()
	defer libMu.Unlock()
	libOverride = path
}

// LibraryPath returns the path of the onnxruntime shared library, searching
// in order:
//
//  1. the path given to SetLibraryPath, else $ONNXRUNTIME_SHARED_LIBRARY_PATH
//     (either must name a file);
//  2. beside the executable: its folder, lib/ in it, and ../lib (an
//     installed binary with the library copied next to it);
//  3. .tools/lib under the repository root, found by walking up from the
//     working directory and from the executable's folder to a folder
//     holding go.mod and .tools (where scripts/setup.sh installs it);
//  4. the folders of $LD_LIBRARY_PATH and the usual system library folders
//     (/usr/local/lib, /usr/lib/<arch>-linux-gnu, /usr/lib64, /usr/lib).
//
// The error lists every place tried and how to install the library.
func LibraryPath() (string, error) {
	libMu.Lock()
	override := libOverride
	libMu.Unlock()
	exe := ""
	if e, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(e); err == nil {
			e = r
		}
		exe = e
	}
	wd, _ := os.Getwd()
	return findLibrary(override, os.Getenv, exe, wd)
}

// findLibrary is LibraryPath with its inputs explicit (for tests).
func findLibrary(override string, getenv func(string) string, exe, wd string) (string, error) {
	if override == "" {
		override = getenv(LibraryEnv)
	}
	if override != "" {
		if !isFile(override) {
			return "", fmt.Errorf("infer: onnxruntime library %s (from --ort-lib or %s) is not a file; fix it, unset it, or run scripts/setup.sh", override, LibraryEnv)
		}
		return override, nil
	}
	name := libraryName()
	var tried []string
	try := func(p string) bool {
		tried = append(tried, p)
		return isFile(p)
	}
	if exe != "" {
		dir := filepath.Dir(exe)
		for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, "lib", name), filepath.Join(dir, "..", "lib", name)} {
			if try(p) {
				return p, nil
			}
		}
	}
	var starts []string
	if wd != "" {
		starts = append(starts, wd)
	}
	if exe != "" {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		if root, ok := findRepoRoot(s); ok {
			if p := filepath.Join(root, libraryRel); try(p) {
				return p, nil
			}
		}
	}
	var dirs []string
	for _, d := range filepath.SplitList(getenv("LD_LIBRARY_PATH")) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	dirs = append(dirs, "/usr/local/lib")
	if arch != "" {
		dirs = append(dirs, "/usr/lib/"+arch+"-linux-gnu")
	}
	dirs = append(dirs, "/usr/lib64", "/usr/lib")
	for _, d := range dirs {
		if p := filepath.Join(d, name); try(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("infer: onnxruntime library %s not found (tried %s): run scripts/setup.sh in the repository (installs .tools/lib/%s), copy the library beside the executable, or set %s (convert: --ort-lib)",
		name, strings.Join(tried, ", "), name, LibraryEnv)
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
