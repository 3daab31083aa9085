package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/linearize/linearize/tokenize"
)

// runLong writes every source file whose prose reaches minTokens WordPiece
// tokens as one plain-text file (paragraphs separated by blank lines, at
// most maxTokens tokens' worth of paragraphs) into outDir/tune/ or
// outDir/heldout/: held-out files come from the top-level folders in held,
// the others are for tuning, so the two never share a source file or a
// folder. The long-document retrieval test (`convert evaluate`) reads these
// folders.
func runLong(src, outDir string, tok *tokenize.Tokenizer, held map[string]bool, minTokens, maxTokens int) error {
	if tok == nil {
		return fmt.Errorf("-long-out needs -vocab (documents are selected by WordPiece length)")
	}
	paths, err := sourceFiles(src)
	if err != nil {
		return err
	}
	counts := map[string]int{}
	for _, set := range []string{"tune", "heldout"} {
		if err := os.MkdirAll(filepath.Join(outDir, set), 0o755); err != nil {
			return err
		}
	}
	for _, sf := range paths {
		data, err := os.ReadFile(sf.path)
		if err != nil {
			return err
		}
		var kept []string
		total := 0
		for _, para := range Prose(string(data)) {
			para = strings.Join(strings.Fields(para), " ")
			if para == "" {
				continue
			}
			n := len(tok.IDs(para))
			if total+n > maxTokens {
				break
			}
			kept = append(kept, para)
			total += n
		}
		if total < minTokens {
			continue
		}
		set := "tune"
		if held[sf.top] {
			set = "heldout"
		}
		name := strings.ReplaceAll(strings.TrimSuffix(sf.rel, ".rst.txt"), "/", "-") + ".txt"
		if err := writeFile(filepath.Join(outDir, set, name), strings.Join(kept, "\n\n")+"\n"); err != nil {
			return err
		}
		counts[set]++
	}
	fmt.Printf("doctext: %s: %d tuning and %d held-out documents of %d..%d tokens\n", outDir, counts["tune"], counts["heldout"], minTokens, maxTokens)
	return nil
}

// sourceFile is a .rst.txt file in a folder below the source root.
type sourceFile struct {
	path string // as found under the root
	rel  string // relative to the root, with forward slashes
	top  string // the top-level folder it is in
}

// sourceFiles lists the .rst.txt files under src that sit in a folder
// (top-level files belong to neither set), sorted.
func sourceFiles(src string) ([]sourceFile, error) {
	var paths []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".rst.txt") {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var files []sourceFile
	for _, p := range paths {
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		if top, _, nested := strings.Cut(rel, "/"); nested {
			files = append(files, sourceFile{p, rel, top})
		}
	}
	return files, nil
}

// writeFile writes data through a temporary file renamed into place.
func writeFile(path, data string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".doctext-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
