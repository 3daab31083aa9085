package linearize_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/ops"
)

// A conversion is its op (ops/), its rewrite with its entry in the
// registry (convert/, convert.Conversions) and its command
// (cmd/convert/cmd_NAME.go); the tools that handle every conversion (the
// CLI's command list and bench, the cost model, the plots, finetune's
// fits, validate's guarded rows) look conversions up instead of naming
// them. TestOnePlacePerConversion holds the code to that (issue 31, "a
// new conversion's name in ≤ 4 non-test files outside its op and
// rewrite").
//
// What counts as naming a conversion, in a non-test .go file outside
// ops/ and convert/ (and outside testdata), comments left out:
//
//   - a string literal that holds its op type ("LaraAttention", also
//     inside "ai.linearize:LaraAttention"), or its name as one of its
//     comma-separated items ("lara", "original,performer,local-pooled");
//     help texts that merely mention a conversion in prose do not count;
//   - an identifier (declared or used, local or qualified) whose words
//     (split at case changes, digits and underscores) hold the name's
//     words in a row, case-insensitively: runLara, convert.ToLARA,
//     convert.LaraOptions, localPooledList, ops.LocalPooledOp; and its
//     cost-model form's constant (convert.Windowed).
//
// The window conversion is named by an ordinary word the code uses for
// other windows (long's and embed's windows of a document, finetune's
// calibration windows, ModernBERT's --window): for it only the op type,
// the form's constant and the identifiers of convert and ops that start
// with its name (convert.ToWindow, convert.WindowOptions, ops.WindowOp)
// count.
//
// A new conversion has to be named in its command and in every file
// that names conversions side by side (a switch, a table, a list): a file
// naming one conversion alone is that conversion's own (its command, its
// fine-tuning, its parameters, a lab instrument of it), which a new
// conversion has none of until it wants one. So the measure of a
// conversion is its command file plus the files that name it beside
// another conversion, and each must be at most maxConversionFiles. The
// test logs every file that names each conversion.
func TestOnePlacePerConversion(t *testing.T) {
	var convs []namedConversion
	names := map[string]bool{}
	for _, c := range convert.Conversions() {
		if c.Name == "" || names[c.Name] {
			t.Errorf("conversion %+v: empty or repeated name", c)
		}
		names[c.Name] = true
		if _, ok := ops.SchemaOf(c.Op); !ok {
			t.Errorf("conversion %s: op %q has no schema in ops", c.Name, c.Op)
		}
		if got, ok := convert.LookupConversion(c.Name); !ok || got.Name != c.Name {
			t.Errorf("LookupConversion(%q) = %+v, %v", c.Name, got.Name, ok)
		}
		if got, ok := convert.ConversionOfOp(c.Op); !ok || got.Name != c.Name {
			t.Errorf("ConversionOfOp(%q) = %+v, %v", c.Op, got.Name, ok)
		}
		convs = append(convs, namedConversion{name: c.Name, op: c.Op, form: formConstant(t, c.Form())})
	}
	if len(convs) == 0 {
		t.Fatal("no conversions registered")
	}
	files := namingFiles(t, ".", convs)
	for _, c := range convs {
		command := "cmd/convert/cmd_" + strings.ReplaceAll(c.name, "-", "_") + ".go"
		if _, err := os.Stat(command); err != nil {
			t.Errorf("conversion %s has no command file %s: %v", c.name, command, err)
		}
		var own, shared []string
		for _, f := range sortedKeys(files) {
			named := files[f]
			if !named[c.name] {
				continue
			}
			if len(named) > 1 {
				shared = append(shared, f+" (with "+strings.Join(others(named, c.name), ", ")+")")
			} else {
				own = append(own, f)
			}
		}
		measure := len(shared)
		if !slices.Contains(own, command) && !slices.ContainsFunc(shared, func(s string) bool { return strings.HasPrefix(s, command+" ") }) {
			t.Errorf("conversion %s: its command %s does not name it", c.name, command)
		}
		if slices.Contains(own, command) {
			measure++
		}
		t.Logf("%s: %d files name it; measure %d (its command and %d shared)\n\town: %s\n\tshared: %s",
			c.name, len(own)+len(shared), measure, len(shared), strings.Join(own, " "), strings.Join(shared, " "))
		if measure > maxConversionFiles {
			t.Errorf("conversion %s is named beside other conversions in %d files outside ops/ and convert/ (with its command %s: %d, at most %d): %s; look it up in the registry (convert.Conversions) instead",
				c.name, len(shared), command, measure, maxConversionFiles, strings.Join(shared, "; "))
		}
	}
}

// maxConversionFiles bounds the files a new conversion is named in
// outside its op and rewrite (issue 31).
const maxConversionFiles = 4

// ordinaryWords are conversion names the code also uses as ordinary
// words (see TestOnePlacePerConversion).
var ordinaryWords = map[string]bool{"window": true}

// namedConversion is what TestOnePlacePerConversion looks for of a
// conversion: its name, its op type and its form's constant in convert.
type namedConversion struct {
	name, op, form string
}

// formConstant returns the name of the constant of convert that declares
// form f (`Lara Form = "lara"`).
func formConstant(t *testing.T, f convert.Form) string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("convert", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Form" {
					continue
				}
				for i, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Value == strconv.Quote(string(f)) {
						return vs.Names[i].Name
					}
				}
			}
		}
	}
	t.Fatalf("no constant of convert declares the form %q", f)
	return ""
}

// namingFiles returns, for every non-test .go file under root outside
// ops/, convert/ and testdata that names a conversion, the conversions
// it names.
func namingFiles(t *testing.T, root string, convs []namedConversion) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(p)
		if d.IsDir() {
			if base := d.Name(); rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || rel == "ops" || rel == "convert") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, c := range convs {
			if names(f, c) {
				if out[rel] == nil {
					out[rel] = map[string]bool{}
				}
				out[rel][c.name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// names reports whether file f names conversion c (the rules of
// TestOnePlacePerConversion).
func names(f *ast.File, c namedConversion) bool {
	words := identWords(c.name)
	ordinary := ordinaryWords[c.name]
	lib := map[string]bool{} // the file's names of packages convert and ops
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if p == module+"/convert" || p == module+"/ops" {
			name := path.Base(p)
			if im.Name != nil {
				name = im.Name.Name
			}
			lib[name] = true
		}
	}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if found {
			return false
		}
		switch x := n.(type) {
		case *ast.BasicLit:
			if x.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(x.Value)
			if err != nil {
				s = x.Value
			}
			if strings.Contains(strings.ToLower(s), strings.ToLower(c.op)) {
				found = true
			}
			if !ordinary {
				for _, item := range strings.Split(s, ",") {
					found = found || strings.EqualFold(strings.TrimSpace(item), c.name)
				}
			}
		case *ast.SelectorExpr:
			id, ok := x.X.(*ast.Ident)
			if !ok || !lib[id.Name] {
				return true
			}
			sel := x.Sel.Name
			w := identWords(sel)
			found = sel == c.form || hasRun(w, words) && (!ordinary || startsWith(w, words) || startsWith(w, append([]string{"to"}, words...)))
			return false
		case *ast.Ident:
			found = x.Name == c.form || !ordinary && hasRun(identWords(x.Name), words)
		}
		return true
	})
	return found
}

// identWords splits an identifier or a name into lower-case words at
// case changes (ToLARA: to, lara; LaraOptions: lara, options), digits
// and any other character ("local-pooled": local, pooled).
func identWords(s string) []string {
	var out []string
	rs := []rune(s)
	start := -1
	flush := func(i int) {
		if start >= 0 {
			out = append(out, strings.ToLower(string(rs[start:i])))
			start = -1
		}
	}
	for i, r := range rs {
		if !unicode.IsLetter(r) {
			flush(i)
			continue
		}
		if start >= 0 && unicode.IsUpper(r) {
			prev := rs[i-1]
			if unicode.IsLower(prev) || unicode.IsUpper(prev) && i+1 < len(rs) && unicode.IsLower(rs[i+1]) {
				flush(i)
			}
		}
		if start < 0 {
			start = i
		}
	}
	flush(len(rs))
	return out
}

// hasRun reports whether words holds run as consecutive words.
func hasRun(words, run []string) bool {
	for i := 0; i+len(run) <= len(words); i++ {
		if slices.Equal(words[i:i+len(run)], run) {
			return true
		}
	}
	return false
}

// startsWith reports whether words begin with run.
func startsWith(words, run []string) bool {
	return len(words) >= len(run) && slices.Equal(words[:len(run)], run)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// others lists the names in named but name, sorted.
func others(named map[string]bool, name string) []string {
	var out []string
	for _, n := range sortedKeys(named) {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}

// TestConversionWords checks the splitting the counting relies on.
func TestConversionWords(t *testing.T) {
	for s, want := range map[string]string{
		"ToLARA": "to lara", "LaraOptions": "lara options", "localPooledList": "local pooled list", "local-pooled": "local pooled",
		"dropScalarDeclarations": "drop scalar declarations", "ops.LocalPooledOp": "ops local pooled op", "MaxWindow": "max window", "perf2": "perf",
	} {
		if got := strings.Join(identWords(s), " "); got != want {
			t.Errorf("identWords(%q) = %q, want %q", s, got, want)
		}
	}
	src := `package p
import ("github.com/linearize/linearize/convert"; "github.com/linearize/linearize/ops")
// LaraAttention in a comment, convert.ToLARA too
var a = "a declaration of the LARA flags"
var b = convert.MetaWindow
var c = fs.Int("window", 0, "tokens of one window")
var d = ops.LinformerOp
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		conv namedConversion
		want bool
	}{
		{namedConversion{"lara", "LaraAttention", "Lara"}, false},
		{namedConversion{"window", "WindowAttention", "Windowed"}, false},
		{namedConversion{"linformer", "LinformerAttention", "Linformer"}, true},
	} {
		if got := names(f, c.conv); got != c.want {
			t.Errorf("names(%s) = %v, want %v", c.conv.name, got, c.want)
		}
	}
}
