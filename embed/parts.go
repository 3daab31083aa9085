package embed

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

// A folder of parts is what `convert embed -o DIR/` writes for a corpus of
// any size: part-00000.npy (float32 [vectors, dim]) and
// part-00000.ids.txt (one id per line), … (PartNPY), or part-00000.parquet,
// … (PartParquet: ids and vectors in one file, see ParquetWriter), each
// of PartSize documents, and manifest.json (a Manifest).
//
// Each part is committed with its record, part-00000.json (its Part
// entry), as one fsutil.WriteSet; the first part's set also writes
// manifest.json, the head (model, tokenizer, settings) with no parts and
// not complete. So a commit writes the part's files and a record of a
// few hundred bytes, whatever the number of parts before it, and the
// records list exactly the parts that are whole, whatever stops the
// run. Finish writes manifest.json whole, every part listed and
// complete, in one set with the last part's files, then removes the
// records (a complete manifest is read alone: records a crash leaves
// then are ignored, and removed by the next OpenParts). ReadManifest
// reads a folder that is not complete as manifest.json followed by its
// records, which gives the Manifest a manifest listing those parts
// gives; a manifest.json that lists parts itself (written before part
// records existed) is continued the same way.

// PartsFormat names the manifest's format for a folder of .npy parts,
// and PartsFormatParquet for a folder of .parquet parts (a tool that
// knows only the first refuses the second by its name).
const (
	PartsFormat        = "linearize-embed-parts/1"
	PartsFormatParquet = "linearize-embed-parts/2"
)

// PartFormat is the file format of a folder's parts.
type PartFormat string

// The part formats.
const (
	// PartNPY: NAME.npy (float32 [vectors, dim]) and NAME.ids.txt.
	PartNPY PartFormat = "npy"
	// PartParquet: NAME.parquet, columns id and embedding.
	PartParquet PartFormat = "parquet"
)

// manifestFormat is the manifest format of a folder of parts of format f.
func (f PartFormat) manifestFormat() string {
	if f == PartParquet {
		return PartsFormatParquet
	}
	return PartsFormat
}

// ManifestName is the manifest's file name in a folder of parts.
const ManifestName = "manifest.json"

// The bounds of ReadManifest. manifest.json is read whole, at most
// maxManifestBytes (64 MiB: the head, or a manifest of about 200 000
// parts of ~300 bytes each) plus maxEntryBytes (64 KiB) for each part in
// the folder (its .npy or .parquet file), so that a complete manifest is
// never refused for the number of parts it lists, only for entries
// (ids) over 64 KiB on average or for memory (fsutil.ReadAll: half of
// what the process may use). A part record is at most maxManifestBytes:
// an entry that fitted in a manifest fits in its record.
// (Variables for the tests.)
var (
	maxManifestBytes int64 = 64 << 20
	maxEntryBytes    int64 = 64 << 10
)

// recordExt ends the name of a part's record: part-00000.json.
const recordExt = ".json"

// FileSum is a file by name and SHA-256.
type FileSum struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
}

// Settings are what makes two runs' vectors the same: a run resumes a
// folder only when they agree (the shard and the part size aside when
// shards are merged).
type Settings struct {
	// Input names the documents: "--jsonl FILE", "--docs DIR", … .
	Input      string  `json:"input"`
	Mode       Mode    `json:"mode"`
	Pooling    Pooling `json:"pooling"`
	Normalised bool    `json:"normalised"`
	MaxTokens  int     `json:"max_tokens"`
	Window     int     `json:"window"`
	Overlap    int     `json:"overlap"`
	Output     string  `json:"output"`
	Dim        int     `json:"dim"`
	Backend    string  `json:"backend"`
	SkipBad    bool    `json:"skip_bad_docs"`
	PartSize   int     `json:"part_size"`
	// PartFormat is the parts' file format ("npy" in a manifest written
	// before there was a choice).
	PartFormat PartFormat `json:"part_format"`
	// Shard is "i/n" when the run embeds shard i of n (ShardOf), else "".
	Shard string `json:"shard,omitempty"`
	// Inputs are the inputs fed unchanged with every pass
	// (Options.Inputs: "task_id=int64[] 4"), "" when none.
	Inputs string `json:"inputs,omitempty"`
	// Prompt is the text that begins every text (Options.Prompt), ""
	// when none.
	Prompt string `json:"prompt,omitempty"`
	// ChunkSpans: the ids of chunks carry their spans
	// (WriteOptions.ChunkSpans).
	ChunkSpans bool `json:"chunk_spans,omitempty"`
}

// Part is one part of a folder: its files are Name+".npy" and
// Name+".ids.txt", or Name+".parquet".
type Part struct {
	Name string `json:"name"`
	// FirstID and LastID are the ids of its first and last document.
	FirstID   string `json:"first_id"`
	LastID    string `json:"last_id"`
	Documents int    `json:"documents"`
	// Vectors is Documents, or more in chunks mode (ids "docid#k").
	Vectors int `json:"vectors"`
	// Records is the number of input records (documents of every shard,
	// bad ones included) read up to its last document: where a resumed
	// run continues.
	Records int64 `json:"input_records"`
	// SkippedBad counts the bad documents skipped since the part before.
	SkippedBad int `json:"skipped_bad"`
	// SHA256 is the SHA-256 of the vectors file (.npy or .parquet);
	// IDsSHA256 that of the ids file (.npy parts only).
	SHA256    string `json:"sha256"`
	IDsSHA256 string `json:"ids_sha256,omitempty"`
}

// Manifest describes a folder of parts.
type Manifest struct {
	Format string `json:"format"`
	// Tool is the version of the tool that began the folder.
	Tool      string    `json:"tool"`
	Model     FileSum   `json:"model"`
	Tokenizer []FileSum `json:"tokenizer"`
	Settings  Settings  `json:"settings"`
	Parts     []Part    `json:"parts"`
	// The totals over the parts; Complete once the input has ended.
	Documents  int   `json:"documents"`
	Vectors    int   `json:"vectors"`
	SkippedBad int   `json:"skipped_bad"`
	Records    int64 `json:"input_records"`
	Complete   bool  `json:"complete"`
	// MergedFrom lists the folders `embed-merge` merged into this one.
	MergedFrom []string `json:"merged_from,omitempty"`
}

// addTotals adds the totals of part p to m's (Records: the input
// records up to the end of p).
func (m *Manifest) addTotals(p Part) {
	m.Documents += p.Documents
	m.Vectors += p.Vectors
	m.SkippedBad += p.SkippedBad
	m.Records = p.Records
}

// jsonFile is the file at path of a WriteSet holding v as indented JSON
// and a line break.
func jsonFile(path string, v any) (fsutil.SetFile, error) {
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fsutil.SetFile{}, err
	}
	return fsutil.FileBytes(path, append(js, '\n')), nil
}

// FileSHA256 is the SHA-256 of the file at path, read in pieces.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// TokenizerFiles are the files the tokenizer and pooling of the model at
// modelPath are read from (vocab, when given, names the tokenizer):
// every companion file (tokenizer, its configuration, the
// sentence-transformers files) present in that folder, by name and
// SHA-256, sorted.
func TokenizerFiles(vocab, modelPath string) ([]FileSum, error) {
	dir := ""
	if vocab != "" {
		dir = vocab
		if st, err := os.Stat(vocab); err == nil && !st.IsDir() {
			dir = filepath.Dir(vocab)
		}
	} else {
		dir = tokenize.CompanionDir(modelPath)
	}
	var out []FileSum
	seen := map[string]bool{}
	add := func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			return nil
		}
		sum, err := FileSHA256(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			rel = filepath.Base(p)
		}
		out = append(out, FileSum{File: filepath.ToSlash(rel), SHA256: sum})
		return nil
	}
	if vocab != "" {
		if err := add(vocab); err != nil {
			return nil, err
		}
	}
	if dir == "" {
		return out, nil
	}
	for _, name := range tokenize.Companions {
		if err := add(filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ShardOf is the shard, of n, that the document with this id belongs to:
// FNV-1a (64 bits) of the id's bytes, mod n. n processes given
// shards 0…n−1 split a corpus with no coordination, and every id lands
// in exactly one.
func ShardOf(id string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(id))
	return int(h.Sum64() % uint64(n))
}

// ParseShard reads "i/n" (0 ≤ i < n, 1 ≤ n ≤ 65536).
func ParseShard(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		i, err = strconv.Atoi(a)
		if err == nil {
			n, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || n < 1 || n > 65536 || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("shard %q: want i/n with 0 ≤ i < n ≤ 65536", s)
	}
	return i, n, nil
}

// MismatchError is a folder's manifest that disagrees with the run:
// each of Diffs names a setting, its value here and in the manifest.
type MismatchError struct {
	Dir   string
	Diffs []string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("embed: %s holds parts made otherwise: %s (use another folder, or the flags and files it was made with)",
		e.Dir, strings.Join(e.Diffs, "; "))
}

// Diff names what differs between two manifests' model, tokenizer and
// settings ("mode: chunk here, truncate in the manifest"), leaving out
// the settings named in ignore (JSON names, e.g. "shard").
func Diff(here, there *Manifest, ignore ...string) []string {
	var d []string
	if here.Model.SHA256 != there.Model.SHA256 {
		d = append(d, fmt.Sprintf("model: %s (sha256 %.12s…) here, %s (sha256 %.12s…) in the manifest", here.Model.File, here.Model.SHA256, there.Model.File, there.Model.SHA256))
	}
	if !reflect.DeepEqual(here.Tokenizer, there.Tokenizer) {
		d = append(d, fmt.Sprintf("tokenizer files: %s here, %s in the manifest", sumsString(here.Tokenizer), sumsString(there.Tokenizer)))
	}
	a, b := reflect.ValueOf(here.Settings), reflect.ValueOf(there.Settings)
	t := a.Type()
outer:
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		for _, ig := range ignore {
			if ig == name {
				continue outer
			}
		}
		if x, y := a.Field(i).Interface(), b.Field(i).Interface(); x != y {
			d = append(d, fmt.Sprintf("%s: %v here, %v in the manifest", name, show(x), show(y)))
		}
	}
	return d
}

func show(v any) string {
	// An empty string, or one whose white space would not show (a
	// prompt's trailing space), is quoted.
	if s, ok := v.(string); ok && (s == "" || strings.TrimSpace(s) != s) {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

func sumsString(s []FileSum) string {
	if len(s) == 0 {
		return "none"
	}
	var parts []string
	for _, f := range s {
		parts = append(parts, fmt.Sprintf("%s %.12s…", f.File, f.SHA256))
	}
	return strings.Join(parts, ", ")
}

// ReadManifest reads the manifest of the folder of parts dir; (nil, nil)
// when it has no manifest.json. A complete folder's is manifest.json; a
// folder still being written is read as manifest.json (its head, and the
// parts it lists when written before part records existed) followed by
// the records of the parts committed since (part-00000.json, …), which
// must follow on from it without a gap, each naming its part: the
// Manifest is the one a manifest listing every committed part gives. A
// commit that a kill left half done in the folder is completed (or
// rolled back) first.
func ReadManifest(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestName)
	fsutil.RemoveStaleTemps(p)
	data, err := readManifestFile(dir, p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("embed: %s: %w", p, err)
	}
	if m.Settings.PartFormat == "" {
		m.Settings.PartFormat = PartNPY
	}
	switch {
	case m.Format != PartsFormat && m.Format != PartsFormatParquet:
		return nil, fmt.Errorf("embed: %s: format %q, want %q or %q", p, m.Format, PartsFormat, PartsFormatParquet)
	case m.Settings.PartFormat != PartNPY && m.Settings.PartFormat != PartParquet,
		m.Format != m.Settings.PartFormat.manifestFormat():
		return nil, fmt.Errorf("embed: %s: format %q with parts of format %q", p, m.Format, m.Settings.PartFormat)
	}
	if m.Complete {
		return &m, nil
	}
	if err := readRecords(dir, &m); err != nil {
		return nil, err
	}
	if len(m.Parts) == 0 {
		m.Parts = nil // as a manifest of no parts reads
	}
	return &m, nil
}

// readManifestFile reads the manifest.json p of dir, within its bound.
func readManifestFile(dir, p string) ([]byte, error) {
	f, st, err := fsutil.OpenFile(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bound := maxManifestBytes
	if st.Size() > bound {
		n, err := countPartFiles(dir)
		if err != nil {
			return nil, err
		}
		bound += n * maxEntryBytes
	}
	return fsutil.ReadAll(f, p, st, bound)
}

// countPartFiles counts the parts in dir: their files part-*.npy and
// part-*.parquet.
func countPartFiles(dir string) (int64, error) {
	names, err := readNames(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, name := range names {
		if strings.HasPrefix(name, "part-") && (strings.HasSuffix(name, ".npy") || strings.HasSuffix(name, ".parquet")) {
			n++
		}
	}
	return n, nil
}

// readNames lists the names in dir, unsorted.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("embed: %s: %w", dir, err)
	}
	return names, nil
}

// partName is the name of the folder's k-th part (from 0).
func partName(k int) string { return fmt.Sprintf("part-%05d", k) }

// recordIndex is k when name is the record of the k-th part
// (partName(k)+recordExt).
func recordIndex(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "part-")
	if !ok {
		return 0, false
	}
	if digits, ok = strings.CutSuffix(digits, recordExt); !ok || len(digits) < 5 || len(digits) > 10 {
		return 0, false
	}
	k, err := strconv.Atoi(digits)
	if err != nil || k < 0 || partName(k)+recordExt != name {
		return 0, false
	}
	return k, true
}

// recordIndexes are the indexes of the part records in dir, in order.
func recordIndexes(dir string) ([]int, error) {
	names, err := readNames(dir)
	if err != nil {
		return nil, err
	}
	var ks []int
	for _, name := range names {
		if k, ok := recordIndex(name); ok {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks, nil
}

// readRecords appends to m, a manifest that is not complete, the parts
// whose records dir holds after those m lists, and adds them to its
// totals. The records must follow on from m's parts with no gap, each
// naming its own part, with a part's counts (a document or more, at
// least as many vectors) and its files' SHA-256; a record of a part m lists already (left by a tool
// that rewrote the manifest) is passed over.
func readRecords(dir string, m *Manifest) error {
	ks, err := recordIndexes(dir)
	if err != nil {
		return err
	}
	for _, k := range ks {
		if k < len(m.Parts) {
			continue
		}
		name := partName(len(m.Parts))
		if k != len(m.Parts) {
			return fmt.Errorf("embed: %s: the record %s%s follows %d parts: %s%s is missing (the folder was changed by another program)", dir, partName(k), recordExt, len(m.Parts), name, recordExt)
		}
		path := filepath.Join(dir, name+recordExt)
		data, err := fsutil.ReadFile(path, maxManifestBytes)
		if err != nil {
			return fmt.Errorf("embed: %w", err)
		}
		var p Part
		if err := json.Unmarshal(data, &p); err != nil {
			return fmt.Errorf("embed: %s: %w", path, err)
		}
		npy := m.Settings.PartFormat == PartNPY
		switch {
		case p.Name != name:
			return fmt.Errorf("embed: %s names the part %q", path, p.Name)
		case p.Documents < 1 || p.Vectors < p.Documents || p.SkippedBad < 0 || p.Records < 0:
			return fmt.Errorf("embed: %s: %d documents, %d vectors, %d skipped, input record %d: not a part's counts", path, p.Documents, p.Vectors, p.SkippedBad, p.Records)
		case len(p.SHA256) != 64, npy != (len(p.IDsSHA256) == 64), !npy && p.IDsSHA256 != "":
			return fmt.Errorf("embed: %s: no SHA-256 of the part's files", path)
		}
		m.Parts = append(m.Parts, p)
		m.Documents += p.Documents
		m.Vectors += p.Vectors
		m.SkippedBad += p.SkippedBad
		m.Records = p.Records
	}
	return nil
}

// removeRecords removes the part records in dir: those a complete
// manifest replaces, or those of a folder without a manifest (left by a
// removal cut short), which no manifest would follow on from.
func removeRecords(dir string) error {
	ks, err := recordIndexes(dir)
	if err != nil {
		return err
	}
	for _, k := range ks {
		if err := os.Remove(filepath.Join(dir, partName(k)+recordExt)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("embed: %w", err)
		}
	}
	return nil
}

// PartWriter writes a folder of parts as the documents come.
type PartWriter struct {
	dir string
	m   Manifest
	// headed: manifest.json is in the folder (a folder resumed, or one
	// whose first part is committed).
	headed bool
	// the part being filled
	ids     bytes.Buffer
	vecs    []float32
	docs    int
	first   string
	last    string
	records int64
	skipped int
}

// OpenParts opens dir (created if missing; its parent must exist) to
// write the parts of a run described by head (Parts and the totals
// empty). When dir already holds a manifest, it must agree with head
// (model, tokenizer, settings: else a *MismatchError naming what
// differs) and the writer continues after its parts: Resume says where.
func OpenParts(dir string, head Manifest) (*PartWriter, error) {
	if head.Settings.PartSize < 1 {
		return nil, fmt.Errorf("embed: part size %d: want at least 1", head.Settings.PartSize)
	}
	switch head.Settings.PartFormat {
	case "":
		head.Settings.PartFormat = PartNPY
	case PartNPY, PartParquet:
	default:
		return nil, fmt.Errorf("embed: part format %q: want %q or %q", head.Settings.PartFormat, PartNPY, PartParquet)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("embed: %w", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("embed: %s is not a folder", dir)
	}
	old, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	head.Format = head.Settings.PartFormat.manifestFormat()
	w := &PartWriter{dir: dir, m: head}
	w.m.Parts, w.m.Documents, w.m.Vectors, w.m.SkippedBad, w.m.Records, w.m.Complete = nil, 0, 0, 0, 0, false
	if old == nil {
		// Records without a manifest belong to no run: a new one
		// must not follow on from them.
		if err := removeRecords(dir); err != nil {
			return nil, err
		}
		return w, nil
	}
	if d := Diff(&head, old); len(d) > 0 {
		return nil, &MismatchError{Dir: dir, Diffs: d}
	}
	if len(old.MergedFrom) > 0 {
		return nil, fmt.Errorf("embed: %s was written by embed-merge: embed into another folder", dir)
	}
	if old.Complete {
		removeRecords(dir) // left by a Finish cut short after its commit
	}
	old.Tool = cmpOr(old.Tool, head.Tool)
	w.m, w.headed = *old, true
	return w, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Resume is where the run continues: the input records the finished
// parts cover (skip them), the id of the last document they hold ("" for
// none), and whether the folder is complete (nothing is left to do).
func (w *PartWriter) Resume() (records int64, lastID string, complete bool) {
	if n := len(w.m.Parts); n > 0 {
		return w.m.Parts[n-1].Records, w.m.Parts[n-1].LastID, w.m.Complete
	}
	return 0, "", w.m.Complete
}

// Manifest is the manifest as committed so far.
func (w *PartWriter) Manifest() Manifest { return w.m }

// Skip counts a bad document skipped.
func (w *PartWriter) Skip() { w.skipped++ }

// Add adds one document: ids and vecs are its vectors' ids and vectors
// (one each, or one per chunk), record the input records read through
// it. The part is committed once it holds PartSize documents.
func (w *PartWriter) Add(record int64, docID string, ids []string, vecs [][]float32) error {
	if len(ids) != len(vecs) || len(ids) == 0 {
		return fmt.Errorf("embed: document %s: %d ids for %d vectors", docID, len(ids), len(vecs))
	}
	for i, v := range vecs {
		if len(v) != w.m.Settings.Dim {
			return fmt.Errorf("embed: document %s: a vector of %d values, want %d", docID, len(v), w.m.Settings.Dim)
		}
		w.vecs = append(w.vecs, v...)
		w.ids.WriteString(ids[i])
		w.ids.WriteByte('\n')
	}
	if w.docs == 0 {
		w.first = docID
	}
	w.docs++
	w.last, w.records = docID, record
	if w.docs >= w.m.Settings.PartSize {
		return w.flush(false)
	}
	return nil
}

// Finish commits the last part, if any, and marks the folder complete:
// manifest.json is written whole, listing every part (the only write
// whose size grows with the parts, once a run), and the part records
// are removed.
func (w *PartWriter) Finish() error {
	return w.flush(true)
}

// flush commits the part being filled, if it has documents: its files
// and its record as one set (with manifest.json's head when the folder
// has none yet), or, when complete, its files and the manifest listing
// every part, marked complete, as one set, after which the records are
// removed.
func (w *PartWriter) flush(complete bool) error {
	if w.docs == 0 && !complete {
		return nil
	}
	var set []fsutil.SetFile
	var part []Part
	if w.docs > 0 {
		p, files, err := w.encodePart()
		if err != nil {
			return err
		}
		set, part = files, []Part{p}
	}
	if !complete {
		p := part[0]
		rec, err := jsonFile(filepath.Join(w.dir, p.Name+recordExt), &p)
		if err != nil {
			return err
		}
		set = append(set, rec)
		if !w.headed {
			// The head: what the records follow on from.
			head := w.m
			head.Parts = []Part{}
			js, err := jsonFile(filepath.Join(w.dir, ManifestName), &head)
			if err != nil {
				return err
			}
			set = append(set, js)
		}
		if err := fsutil.WriteSet(set...); err != nil {
			return err
		}
		w.headed = true
		w.m.Parts = append(w.m.Parts, p)
		w.m.addTotals(p)
		w.reset()
		return nil
	}
	m := w.m
	m.Parts = append(slices.Clip(w.m.Parts), part...)
	for _, p := range part {
		m.addTotals(p)
	}
	if len(part) == 0 {
		m.SkippedBad += w.skipped
	}
	m.Complete = true
	js, err := jsonFile(filepath.Join(w.dir, ManifestName), &m)
	if err != nil {
		return err
	}
	if err := fsutil.WriteSet(append(set, js)...); err != nil {
		return err
	}
	w.m, w.headed = m, true
	w.reset()
	// The complete manifest is read alone: records that a crash (or a
	// failure to remove them) leaves are harmless, and the next
	// OpenParts removes them.
	removeRecords(w.dir)
	return nil
}

// encodePart is the part being filled, as the next part of the folder:
// its entry and its files.
func (w *PartWriter) encodePart() (Part, []fsutil.SetFile, error) {
	name := partName(len(w.m.Parts))
	dim := w.m.Settings.Dim
	p := Part{Name: name, FirstID: w.first, LastID: w.last, Documents: w.docs, Vectors: len(w.vecs) / dim,
		Records: w.records, SkippedBad: w.skipped}
	ids := w.ids.Bytes()
	if w.m.Settings.PartFormat == PartParquet {
		var b bytes.Buffer
		list := strings.Split(strings.TrimSuffix(string(ids), "\n"), "\n")
		if err := EncodeParquet(&b, list, w.vecs, dim); err != nil {
			return p, nil, err
		}
		p.SHA256 = sum(b.Bytes())
		return p, []fsutil.SetFile{fsutil.FileBytes(filepath.Join(w.dir, name+".parquet"), b.Bytes())}, nil
	}
	npy := EncodeNPYFloat32(w.vecs, len(w.vecs)/dim, dim)
	p.SHA256, p.IDsSHA256 = sum(npy), sum(ids)
	return p, []fsutil.SetFile{fsutil.FileBytes(filepath.Join(w.dir, name+".npy"), npy), fsutil.FileBytes(filepath.Join(w.dir, name+".ids.txt"), ids)}, nil
}

// reset empties the part being filled.
func (w *PartWriter) reset() {
	w.ids.Reset()
	w.vecs, w.docs, w.first, w.last, w.skipped = w.vecs[:0], 0, "", "", 0
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// EncodeNPYFloat32 is a float32 [rows, dim] .npy file holding data
// (row-major), as onnx.EncodeNPY writes it.
func EncodeNPYFloat32(data []float32, rows, dim int) []byte {
	var b bytes.Buffer
	b.Write(NPYHeaderFloat32(rows, dim))
	raw := make([]byte, 4*len(data))
	for i, x := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	b.Write(raw)
	return b.Bytes()
}

// NPYHeaderFloat32 is the header of a float32 [rows, dim] .npy file
// (format 1.0, padded to 64 bytes, as onnx.EncodeNPY writes it).
func NPYHeaderFloat32(rows, dim int) []byte {
	head, _ := onnx.NPYHeader(onnx.Float, []int{rows, dim}) // float32 is always written
	return head
}
