package linearize_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The layers of the module, lowest first, declared once: TestLayers checks
// every package's imports against this table, and the layer list in
// docs/library.md is rendered from it. A package imports only packages of
// lower layers, and packages of its own layer where the layer says so
// (peers). Test files are exempt: a test may import a package above its
// own (ops' tests import infer/infertest, for one).
//
// Paths are relative to the module; "dir/..." is every package below dir,
// and a package named exactly belongs to its own row before any pattern's.
// A new package fails the test until it is placed here.
var layers = []layer{
	{name: "ground", peers: true, pkgs: []string{"internal/...", "onnx/onnxpb"},
		what: "helpers and the generated protobuf types"},
	{name: "onnx", pkgs: []string{"onnx"},
		what: "the model: load, save, tensors, graph helpers"},
	{name: "beside onnx", pkgs: []string{"corpus", "internal/graphfacts", "models", "tokenize"},
		what: "documents and calibration texts, graph facts, BERT graph builders, the tokenizer"},
	{name: "kernels", pkgs: []string{"kernels"},
		what: "the standard ONNX kernels and the registry of all kernels"},
	{name: "custom ops", pkgs: []string{"ops"},
		what: "linearize's ops: schemas, Go kernels, function bodies"},
	{name: "op parameters", pkgs: []string{"features"},
		what: "feature parameters of the ops"},
	{name: "library", pkgs: []string{"convert", "infer"},
		what: "conversion; running, validating, comparing"},
	{name: "over the library", pkgs: []string{"embed", "finetune", "infer/infertest"},
		what: "documents into vectors, fine-tuning, onnxruntime in tests"},
	{name: "cmd/internal", peers: true, pkgs: []string{"cmd/internal/..."},
		what: "the binaries' shared code, harnesses, doc/data and CI tools"},
	{name: "binaries", pkgs: []string{"cmd/convert", "cmd/linlab"},
		what: "the two binaries"},
}

// groundTop is the highest layer a package under internal/ may sit in:
// internal/ holds ground-level helpers only, importing nothing above onnx
// (the design's layout).
const groundTop = "beside onnx"

type layer struct {
	name  string
	pkgs  []string
	peers bool
	what  string
}

const module = "github.com/linearize/linearize"

var update = flag.Bool("update", false, "rewrite the layer list in docs/library.md from the table")

// goPackage is what `go list -json` says of a package, as far as the
// layers go.
type goPackage struct {
	Dir            string
	ImportPath     string
	Imports        []string
	GoFiles        []string
	CgoFiles       []string
	IgnoredGoFiles []string
}

// modulePackages lists the module's packages with the imports of their
// non-test files, under every build constraint: the files this
// configuration leaves out (cgo or not, other systems) are parsed for
// their imports too.
func modulePackages(t *testing.T) []goPackage {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the packages: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-e", "-test=false",
		"-json=Dir,ImportPath,Imports,GoFiles,CgoFiles,IgnoredGoFiles", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		for _, f := range p.IgnoredGoFiles {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, is := range af.Imports {
				path, _ := strconv.Unquote(is.Path.Value)
				if !slices.Contains(p.Imports, path) {
					p.Imports = append(p.Imports, path)
				}
			}
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; run the test from the module", len(pkgs))
	}
	return pkgs
}

// rel returns the module-relative path of an import path of the module,
// "." for the module's root, and ok false for any other import path.
func rel(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

// layerOf returns the index of the layer pkg (module-relative) belongs to,
// or -1: a row naming it exactly, else the longest "dir/..." pattern over
// it.
func layerOf(pkg string) int {
	best, bestLen := -1, -1
	for i, l := range layers {
		for _, p := range l.pkgs {
			if p == pkg {
				return i
			}
			if dir, ok := strings.CutSuffix(p, "/..."); ok && strings.HasPrefix(pkg, dir+"/") && len(dir) > bestLen {
				best, bestLen = i, len(dir)
			}
		}
	}
	return best
}

func layerIndex(name string) int {
	return slices.IndexFunc(layers, func(l layer) bool { return l.name == name })
}

// TestLayers fails when a package imports a package of a higher layer (or
// one of its own layer where the layer has no peers), when a package is in
// no layer, when a row of the table names no package, when a package under
// internal/ sits above groundTop, or when docs/library.md's layer list is
// not what the table renders (go test . -run TestLayers -update rewrites
// it).
func TestLayers(t *testing.T) {
	pkgs := modulePackages(t)
	top := layerIndex(groundTop)
	if top < 0 {
		t.Fatalf("groundTop %q names no layer", groundTop)
	}
	used := map[string]bool{}
	for _, p := range pkgs {
		r, ok := rel(p.ImportPath)
		if !ok {
			t.Errorf("go list ./... listed %s, outside the module", p.ImportPath)
			continue
		}
		if len(p.GoFiles)+len(p.CgoFiles)+len(p.IgnoredGoFiles) == 0 {
			continue // tests only, such as this file's package
		}
		li := layerOf(r)
		if li < 0 {
			t.Errorf("%s is in no layer: add it to the table in layering_test.go", r)
			continue
		}
		for _, pat := range layers[li].pkgs {
			if pat == r || strings.HasSuffix(pat, "/...") && strings.HasPrefix(r, strings.TrimSuffix(pat, "...")) {
				used[pat] = true
			}
		}
		if (r == "internal" || strings.HasPrefix(r, "internal/")) && li > top {
			t.Errorf("%s is in layer %q, above %q: internal/ holds ground-level helpers only", r, layers[li].name, groundTop)
		}
		for _, imp := range p.Imports {
			ir, ok := rel(imp)
			if !ok {
				continue
			}
			ii := layerOf(ir)
			switch {
			case ii < 0:
				t.Errorf("%s imports %s, which is in no layer", r, ir)
			case ii > li:
				t.Errorf("%s (layer %q) imports %s of the higher layer %q", r, layers[li].name, ir, layers[ii].name)
			case ii == li && !layers[li].peers:
				t.Errorf("%s imports %s of its own layer %q, whose packages do not import each other", r, ir, layers[li].name)
			}
		}
	}
	for _, l := range layers {
		for _, pat := range l.pkgs {
			if !used[pat] {
				t.Errorf("layer %q: %s names no package of the module", l.name, pat)
			}
		}
	}
	checkDoc(t)
}

// The layer list in docs/library.md sits between these lines.
const (
	docPath  = "docs/library.md"
	docBegin = "<!-- layers: rendered from the table in layering_test.go; `go test . -run TestLayers -update` rewrites it; do not edit -->\n"
	docEnd   = "<!-- end of layers -->\n"
)

// renderLayers is the layer list as docs/library.md shows it: highest
// first, as imports point down.
func renderLayers() string {
	var b strings.Builder
	b.WriteString("```\n")
	nameW, pkgW := 0, 0
	for _, l := range layers {
		nameW = max(nameW, len(l.name))
		pkgW = max(pkgW, len(pkgList(l)))
	}
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		line := fmt.Sprintf("%d  %-*s  %-*s  %s", i, nameW, l.name, pkgW, pkgList(l), l.what)
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	b.WriteString("```\n")
	return b.String()
}

// pkgList is a layer's packages, "(peers)" marking a layer whose packages
// may import each other.
func pkgList(l layer) string {
	s := strings.Join(l.pkgs, " ")
	if l.peers {
		s += " (peers)"
	}
	return s
}

func checkDoc(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, docBegin)
	j := strings.Index(doc, docEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no layer list (a line %q, the list, a line %q)", docPath, strings.TrimSpace(docBegin), strings.TrimSpace(docEnd))
	}
	want := doc[:i+len(docBegin)] + renderLayers() + doc[j:]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: layer list rewritten", docPath)
		return
	}
	t.Errorf("%s: the layer list differs from the table in layering_test.go; run go test . -run TestLayers -update\nwant:\n%s", docPath, renderLayers())
}
