// Command doctext turns the reStructuredText sources of a documentation
// tree (the CPython docs' _sources/**/*.rst.txt, shipped as plain text by
// Debian's python3.X-doc) into long English documents, one per source
// file and one per line, for calibrating and measuring converted models on
// real text. scripts/real-text.sh runs it; it is not part of the product
// CLI.
//
//	go run ./cmd/internal/doctext -src /usr/share/doc/python3.11/html/_sources -o testdata/real/docs
//
// Markup is stripped by Prose (rst.go). Held-out documents come from the
// top-level folders named by -heldout-dirs, calibration documents from every
// other folder (files at the top level are not used), so the two sets never
// share a source file or a folder. Eligible documents (at least -min-words
// words, and more than -min-tokens WordPiece tokens when -vocab names a
// tokenizer) are sorted by path and picked evenly spaced, so every folder
// is represented and the output is deterministic. Each document keeps its
// first -max-words words (enough for 512 tokens; they stay in reading
// order from the file's start).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/linearize/linearize/tokenize"
)

// The flag lists here, in cmd/internal/realmodel and in cmd/convert match in
// form only; these tools are not part of the CLI and do not share its flags.
func main() {
	src := flag.String("src", "", "root of the reStructuredText sources (…/html/_sources)")
	outDir := flag.String("o", "testdata/real/docs", "output folder for heldout.txt and calibration.txt")
	nHeld := flag.Int("heldout", 32, "held-out documents")
	nCal := flag.Int("calibration", 64, "calibration documents")
	minWords := flag.Int("min-words", 600, "shortest document kept, in words")
	maxWords := flag.Int("max-words", 1500, "words kept of each document")
	heldDirs := flag.String("heldout-dirs", "tutorial,faq,howto,whatsnew", "top-level folders of the held-out set; every other folder is calibration")
	vocab := flag.String("vocab", "", "tokenizer (folder, tokenizer.json or vocab.txt); when set, a document must exceed -min-tokens tokens")
	minTokens := flag.Int("min-tokens", 512, "with -vocab: a document's WordPiece tokens (without [CLS]/[SEP]) must exceed this")
	longOut := flag.String("long-out", "", "instead of the two sets, write every document of at least -long-min-tokens tokens as one file into `DIR`/tune and DIR/heldout (needs -vocab)")
	longMin := flag.Int("long-min-tokens", 4608, "with -long-out: shortest document kept, in WordPiece tokens")
	longMax := flag.Int("long-max-tokens", 16384, "with -long-out: tokens kept of each document (whole paragraphs)")
	flag.Parse()
	if *longOut != "" {
		var tok *tokenize.Tokenizer
		if *vocab != "" {
			var err error
			if tok, err = tokenize.Load(*vocab); err != nil {
				fmt.Fprintln(os.Stderr, "doctext:", err)
				os.Exit(2)
			}
		}
		held := map[string]bool{}
		for _, d := range strings.Split(*heldDirs, ",") {
			held[strings.TrimSpace(d)] = true
		}
		if err := runLong(*src, *longOut, tok, held, *longMin, *longMax); err != nil {
			fmt.Fprintln(os.Stderr, "doctext:", err)
			os.Exit(2)
		}
		return
	}
	if err := run(*src, *outDir, *nHeld, *nCal, *minWords, *maxWords, *heldDirs, *vocab, *minTokens); err != nil {
		fmt.Fprintln(os.Stderr, "doctext:", err)
		os.Exit(2)
	}
}

type doc struct {
	path  string // relative to the source root
	text  string
	words int
}

func run(src, outDir string, nHeld, nCal, minWords, maxWords int, heldDirs, vocab string, minTokens int) error {
	if src == "" {
		return fmt.Errorf("-src is required")
	}
	if nHeld < 1 || nCal < 1 || minWords < 1 || maxWords < minWords {
		return fmt.Errorf("-heldout, -calibration and -min-words must be positive, -max-words at least -min-words")
	}
	var tok *tokenize.Tokenizer
	if vocab != "" {
		var err error
		if tok, err = tokenize.Load(vocab); err != nil {
			return err
		}
	}
	held := map[string]bool{}
	for _, d := range strings.Split(heldDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			held[d] = true
		}
	}
	paths, err := sourceFiles(src)
	if err != nil {
		return err
	}
	var heldDocs, calDocs []doc
	skipped := 0
	for _, sf := range paths {
		data, err := os.ReadFile(sf.path)
		if err != nil {
			return err
		}
		words := strings.Fields(strings.Join(Prose(string(data)), " "))
		if len(words) < minWords {
			skipped++
			continue
		}
		words = words[:min(len(words), maxWords)]
		d := doc{path: sf.rel, text: strings.Join(words, " "), words: len(words)}
		if tok != nil && len(tok.IDs(d.text)) <= minTokens {
			skipped++
			continue
		}
		if held[sf.top] {
			heldDocs = append(heldDocs, d)
		} else {
			calDocs = append(calDocs, d)
		}
	}
	h, err := spread(heldDocs, nHeld, "held-out")
	if err != nil {
		return err
	}
	c, err := spread(calDocs, nCal, "calibration")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		docs []doc
	}{{"heldout.txt", h}, {"calibration.txt", c}} {
		if err := writeDocs(filepath.Join(outDir, f.name), f.docs); err != nil {
			return err
		}
		folders := map[string]int{}
		for _, d := range f.docs {
			top, _, _ := strings.Cut(d.path, "/")
			folders[top]++
		}
		fmt.Printf("doctext: %s: %d documents from %s\n", filepath.Join(outDir, f.name), len(f.docs), summary(folders))
	}
	fmt.Printf("doctext: %d source files, %d too short\n", len(paths), skipped)
	return nil
}

// spread picks n of docs (sorted by path) evenly spaced.
func spread(docs []doc, n int, what string) ([]doc, error) {
	if len(docs) < n {
		return nil, fmt.Errorf("only %d %s documents are long enough, want %d (lower -min-words or the count)", len(docs), what, n)
	}
	out := make([]doc, n)
	for i := range out {
		out[i] = docs[i*len(docs)/n]
	}
	return out, nil
}

func summary(folders map[string]int) string {
	var keys []string
	for k := range folders {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s/ %d", k, folders[k]))
	}
	return strings.Join(parts, ", ")
}

// writeDocs writes one document per line through a temporary file renamed
// into place.
func writeDocs(path string, docs []doc) error {
	var b strings.Builder
	for _, d := range docs {
		b.WriteString(d.text)
		b.WriteByte('\n')
	}
	return writeFile(path, b.String())
}
