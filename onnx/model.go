package onnx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/internal/rusage"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// MaxModelBytes bounds the size of a model file Load will read. Protobuf
// itself cannot encode a message over 2 GiB; larger models keep their
// weights in external data files.
const MaxModelBytes = 2 << 30

// MaxExternalBytes bounds the total external data Load will read for one
// model.
const MaxExternalBytes = 64 << 30

// ModelBound is the largest model file Load reads: MaxModelBytes, or
// half the memory the process may use (rusage.ReadBound) when that is
// less.
func ModelBound() int64 { return rusage.ReadBound(MaxModelBytes) }

// tooLargeHint adds to an error of a model file past its bound what
// to do about it.
func tooLargeHint(err error) error {
	if errors.Is(err, fsutil.ErrTooLarge) {
		return fmt.Errorf("%w (a model over 2 GiB keeps its weights in external data)", err)
	}
	return err
}

// Load reads the model at path. Tensors stored as external data are read
// into raw_data; their locations must resolve, after following symbolic
// links, to regular files inside the model's folder. The model is then
// checked with Validate, so every caller works only on well-formed graphs.
// Errors name the file and the tensor or node at fault.
func Load(path string) (*onnxpb.ModelProto, error) {
	f, st, err := fsutil.OpenStat(path) // a FIFO without a writer is announced
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	defer f.Close()
	if st.IsDir() {
		return nil, fmt.Errorf("onnx: %s is a directory, not a model file", path)
	}
	// The file is read into memory: it may take MaxModelBytes, or half
	// the memory the process may use when that is less (ModelBound). A
	// regular file is checked before any byte is read; a pipe or a device
	// has no size to trust (a FIFO's is 0) and is read in pieces, refused
	// as soon as it passes the bound (/dev/zero costs the bound, not the
	// process), and decoded from memory.
	var r io.Reader = f
	var data []byte
	size := st.Size()
	if !st.Mode().IsRegular() {
		if data, err = fsutil.ReadAll(f, path, st, MaxModelBytes); err != nil {
			return nil, fmt.Errorf("onnx: %w", tooLargeHint(err))
		}
		size, r = int64(len(data)), bytes.NewReader(data)
	}
	if size > MaxModelBytes {
		return nil, fmt.Errorf("onnx: %s: %d bytes is larger than a protobuf model can be (%d); keep weights in external data", path, size, int64(MaxModelBytes))
	}
	if b := ModelBound(); size > b {
		return nil, fmt.Errorf("onnx: %w", tooLargeHint(&fsutil.TooLargeError{Path: path, Size: size, Bound: b, What: rusage.Bound(MaxModelBytes)}))
	}
	// Weights are decoded one tensor at a time (see decodeStream); a file
	// the streaming reader does not take apart is decoded whole, which
	// also gives the canonical error for a bad one.
	m, err := decodeStream(r, size)
	if err == nil {
		err = checkDecoded(m, size)
	} else {
		if data == nil {
			if _, err = f.Seek(0, io.SeekStart); err == nil {
				data, err = fsutil.ReadAll(f, path, st, MaxModelBytes)
			}
			if err != nil {
				return nil, fmt.Errorf("onnx: reading %s: %w", path, err)
			}
		}
		m, err = Decode(data)
	}
	if err != nil {
		// Decode's errors start with "onnx: not an ONNX model"; keep that
		// text, not only the protobuf detail, and name the file.
		return nil, fmt.Errorf("onnx: %s: %s", path, strings.TrimPrefix(err.Error(), "onnx: "))
	}
	if err := loadExternal(m, filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", path, err)
	}
	if err := Validate(m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Decode parses a serialized ModelProto. External data is not resolved.
func Decode(data []byte) (*onnxpb.ModelProto, error) {
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("onnx: not an ONNX model (truncated, or not a protobuf file): %w", err)
	}
	if err := checkDecoded(m, int64(len(data))); err != nil {
		return nil, err
	}
	return m, nil
}

// checkDecoded rejects what parses as protobuf but is no ONNX model.
func checkDecoded(m *onnxpb.ModelProto, size int64) error {
	if size == 0 {
		return errors.New("onnx: not an ONNX model: empty file")
	}
	if m.Graph == nil {
		return errors.New("onnx: not an ONNX model: no graph")
	}
	if m.GetIrVersion() <= 0 {
		return fmt.Errorf("onnx: not an ONNX model: ir_version %d", m.GetIrVersion())
	}
	return nil
}

// Encode serializes m deterministically: the same model gives the same
// bytes.
func Encode(m *onnxpb.ModelProto) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("onnx: encoding model: %w", err)
	}
	return b, nil
}

// ForEachTensor calls fn for every TensorProto held in g: initializers,
// tensor attributes of nodes, and those of nested subgraphs.
func ForEachTensor(g *onnxpb.GraphProto, fn func(*onnxpb.TensorProto) error) error {
	if g == nil {
		return nil
	}
	if err := each(g.Initializer, fn); err != nil {
		return err
	}
	for _, st := range g.SparseInitializer {
		if err := fn(st.GetValues()); err != nil {
			return err
		}
		if err := fn(st.GetIndices()); err != nil {
			return err
		}
	}
	return each(g.Node, func(n *onnxpb.NodeProto) error { return forEachNodeTensor(n, fn) })
}

func forEachNodeTensor(n *onnxpb.NodeProto, fn func(*onnxpb.TensorProto) error) error {
	return each(n.Attribute, func(a *onnxpb.AttributeProto) error {
		if a.T != nil {
			if err := fn(a.T); err != nil {
				return err
			}
		}
		if err := each(a.Tensors, fn); err != nil {
			return err
		}
		if err := ForEachTensor(a.G, fn); err != nil {
			return err
		}
		return each(a.Graphs, func(g *onnxpb.GraphProto) error { return ForEachTensor(g, fn) })
	})
}

// each calls fn for each of xs in order, up to the first error.
func each[T any](xs []T, fn func(T) error) error {
	for _, x := range xs {
		if err := fn(x); err != nil {
			return err
		}
	}
	return nil
}

func forEachModelTensor(m *onnxpb.ModelProto, fn func(*onnxpb.TensorProto) error) error {
	if err := ForEachTensor(m.Graph, fn); err != nil {
		return err
	}
	return each(m.Functions, func(f *onnxpb.FunctionProto) error {
		return each(f.Node, func(n *onnxpb.NodeProto) error { return forEachNodeTensor(n, fn) })
	})
}

// ExternalLocation returns the external-data entries of t as a map.
func externalInfo(t *onnxpb.TensorProto) map[string]string {
	kv := map[string]string{}
	for _, e := range t.ExternalData {
		kv[e.GetKey()] = e.GetValue()
	}
	return kv
}

// resolveInside returns the real path of rel under dir, refusing absolute
// paths, paths that climb out of dir, and symbolic links that lead outside
// dir.
func resolveInside(dir, rel string) (string, error) {
	if rel == "" {
		return "", errors.New("empty location")
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, `\`) {
		return "", fmt.Errorf("location %q is absolute; external data must sit inside the model's folder", rel)
	}
	clean := filepath.Clean(filepath.FromSlash(rel))
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("location %q leaves the model's folder", rel)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	realDir, _ = filepath.Abs(realDir)
	p, err := filepath.EvalSymlinks(filepath.Join(dir, clean))
	if err != nil {
		return "", fmt.Errorf("location %q: %w", rel, err)
	}
	p, _ = filepath.Abs(p)
	if !strings.HasPrefix(p, realDir+string(filepath.Separator)) {
		return "", fmt.Errorf("location %q resolves to %s, outside the model's folder", rel, p)
	}
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("location %q is not a regular file", rel)
	}
	return p, nil
}

// loadExternal reads every external tensor's bytes into raw_data. The
// external_data entries of a tensor whose data_location is not EXTERNAL
// point at nothing (ONNX ignores them); they are dropped so that no reader
// of the loaded model takes them for a reference.
//
// Each byte of a file is read at most once: tensors whose ranges overlap
// (several initializers on the same bytes, as a hostile or a deduplicating
// exporter writes them) share one buffer, each raw_data a slice of it
// capped at its own length. Nothing in the module writes into a tensor's
// raw_data (decoding copies it, CloneShared shares it too). So the bytes
// read are bounded by the files' sizes, whatever the tensors claim, and
// their total is checked against MaxExternalBytes, and half the memory
// the process may use (rusage.ReadBound), before any is read.
func loadExternal(m *onnxpb.ModelProto, dir string) error {
	refs := &externalRefs{dir: dir, byFile: map[string][]externalRef{}, sizes: map[string]int64{}}
	if err := forEachModelTensor(m, refs.add); err != nil {
		return err
	}
	spans, total := refs.spans()
	if total > MaxExternalBytes {
		return fmt.Errorf("external data of %d distinct bytes exceeds %d bytes", total, int64(MaxExternalBytes))
	}
	if b := rusage.ReadBound(MaxExternalBytes); total > b {
		return fmt.Errorf("external data of %d distinct bytes exceeds the bound on it, %s; nothing was read", total, rusage.Bound(MaxExternalBytes))
	}
	return readSpans(spans)
}

// externalRef is the byte range [off, off+length) of a file that holds
// tensor t's data.
type externalRef struct {
	t           *onnxpb.TensorProto
	off, length int64
}

// externalRefs collects the external tensors of a model by file.
type externalRefs struct {
	dir    string
	byFile map[string][]externalRef
	paths  []string // in first-use order, for deterministic reads
	sizes  map[string]int64
}

// add records t's range when its data is external (checked: inside the
// model's folder, within the file, of the size its shape needs), and
// drops the external_data entries of a tensor whose data is not.
func (x *externalRefs) add(t *onnxpb.TensorProto) error {
	if t == nil {
		return nil
	}
	if t.GetDataLocation() != onnxpb.TensorProto_EXTERNAL {
		t.ExternalData = nil
		return nil
	}
	kv := externalInfo(t)
	p, err := resolveInside(x.dir, kv["location"])
	if err != nil {
		return fmt.Errorf("tensor %q: external data: %w", t.GetName(), err)
	}
	size, err := x.fileSize(p)
	if err != nil {
		return fmt.Errorf("tensor %q: external data: %w", t.GetName(), err)
	}
	off, length, err := externalRange(kv, size)
	if err != nil {
		return fmt.Errorf("tensor %q: external data: %w", t.GetName(), err)
	}
	if want := expectedBytes(t); want >= 0 && want != length {
		return fmt.Errorf("tensor %q: external data: %d bytes, shape %v needs %d", t.GetName(), length, t.GetDims(), want)
	}
	x.byFile[p] = append(x.byFile[p], externalRef{t, off, length})
	return nil
}

// fileSize returns the size of file p, stat-ing it the first time.
func (x *externalRefs) fileSize(p string) (int64, error) {
	if size, ok := x.sizes[p]; ok {
		return size, nil
	}
	st, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	x.sizes[p] = st.Size()
	x.paths = append(x.paths, p)
	return st.Size(), nil
}

// externalRange reads the offset and length of external_data entries kv
// (length: to the end of the file when absent) and checks them against
// the file's size.
func externalRange(kv map[string]string, size int64) (off, length int64, err error) {
	if s, ok := kv["offset"]; ok {
		if off, err = strconv.ParseInt(s, 10, 64); err != nil || off < 0 {
			return 0, 0, fmt.Errorf("bad offset %q", s)
		}
	}
	if s, ok := kv["length"]; ok {
		if length, err = strconv.ParseInt(s, 10, 64); err != nil || length < 0 {
			return 0, 0, fmt.Errorf("bad length %q", s)
		}
	} else {
		length = size - off
	}
	if off > size || length > size-off {
		return 0, 0, fmt.Errorf("bytes %d..%d lie past the end of %s (%d bytes)", off, off+length, kv["location"], size)
	}
	return off, length, nil
}

// externalSpan is a byte range [start, end) of a file read at once, and
// the tensors whose data lies in it.
type externalSpan struct {
	path       string
	start, end int64
	refs       []externalRef
}

// spans returns, per file, the ranges merged where they overlap (not
// where they only touch: a tensor the caller drops should free its own
// bytes), and the distinct bytes they cover.
func (x *externalRefs) spans() (spans []externalSpan, total int64) {
	for _, p := range x.paths {
		refs := x.byFile[p]
		sort.SliceStable(refs, func(i, j int) bool { return refs[i].off < refs[j].off })
		for _, r := range refs {
			if n := len(spans); n > 0 && spans[n-1].path == p && r.off < spans[n-1].end {
				sp := &spans[n-1]
				if e := r.off + r.length; e > sp.end {
					total += e - sp.end
					sp.end = e
				}
				sp.refs = append(sp.refs, r)
				continue
			}
			spans = append(spans, externalSpan{p, r.off, r.off + r.length, []externalRef{r}})
			total += r.length
		}
	}
	return spans, total
}

// readSpans reads each span once and gives each of its tensors its slice
// of the bytes as raw_data, capped at its own length.
func readSpans(spans []externalSpan) error {
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for _, sp := range spans {
		if f == nil || f.Name() != sp.path {
			if f != nil {
				f.Close()
			}
			var err error
			if f, err = os.Open(sp.path); err != nil {
				return fmt.Errorf("tensor %q: external data: %w", sp.refs[0].t.GetName(), err)
			}
		}
		buf := make([]byte, sp.end-sp.start)
		if _, err := f.ReadAt(buf, sp.start); err != nil {
			return fmt.Errorf("tensor %q: external data: %w", sp.refs[0].t.GetName(), err)
		}
		for _, r := range sp.refs {
			a, b := r.off-sp.start, r.off-sp.start+r.length
			r.t.RawData = buf[a:b:b]
			r.t.ExternalData = nil
			r.t.DataLocation = nil
		}
	}
	return nil
}

// expectedBytes returns the raw byte size the tensor's shape and type need,
// or -1 if it cannot be told.
func expectedBytes(t *onnxpb.TensorProto) int64 {
	es := int64(ElemSize(DataType(t.GetDataType())))
	if es == 0 {
		return -1
	}
	n := int64(1)
	for _, d := range t.GetDims() {
		if d < 0 || d > MaxTensorElements || (d != 0 && n > MaxTensorElements/d) {
			return -1
		}
		n *= d
	}
	return n * es
}

// SaveOptions controls Save.
type SaveOptions struct {
	// Overwrite allows path to name an existing file that is also the
	// model's source (Input). Without it Save refuses to replace its input.
	Overwrite bool
	// Input is the path the model was read from, if any.
	Input string
	// ExternalData writes every initializer of at least ExternalMin bytes
	// to PATH.data beside the model. Save switches it on by itself when the
	// model would not fit in one protobuf message.
	ExternalData bool
	ExternalMin  int
}

// Save writes m to path atomically: the bytes go to a temporary file in the
// same folder, which is renamed over path only when complete. It refuses to
// overwrite opts.Input unless opts.Overwrite is set. m is not modified.
func Save(m *onnxpb.ModelProto, path string, opts SaveOptions) error {
	if err := CheckSavePath(path, opts); err != nil {
		return err
	}
	size := proto.Size(m)
	if opts.ExternalData || size > MaxModelBytes-(1<<20) {
		return saveExternal(m, path, opts)
	}
	return writeAtomic(path, func(w io.Writer) error { return encodeStream(w, m) })
}

// SaveWith writes m to path as Save does, together with the files extra,
// as one set (fsutil.WriteSet): after a failure or a signal at any point,
// either the old files or the new ones are in place (a model and its
// tokenizer folder are replaced together). A model written with external
// data is saved first and extra after it.
func SaveWith(m *onnxpb.ModelProto, path string, opts SaveOptions, extra ...fsutil.SetFile) error {
	if len(extra) == 0 {
		return Save(m, path, opts)
	}
	if err := CheckSavePath(path, opts); err != nil {
		return err
	}
	if size := proto.Size(m); opts.ExternalData || size > MaxModelBytes-(1<<20) {
		if err := saveExternal(m, path, opts); err != nil {
			return err
		}
		return fsutil.WriteSet(extra...)
	}
	model := fsutil.SetFile{Path: path, Fill: func(w io.Writer) error { return encodeStream(w, m) }}
	return fsutil.WriteSet(append([]fsutil.SetFile{model}, extra...)...)
}

// ErrOverwriteInput is matched by errors.Is when Save or CheckSavePath
// refuses to replace the model's own input file.
var ErrOverwriteInput = errors.New("onnx: refusing to overwrite the input model")

// CheckSavePath reports whether Save could write path with opts, without
// writing anything: path must not be the input model (unless
// opts.Overwrite), must not be a directory, and its folder must exist.
// Commands call it before doing any work, so a bad -o fails at once.
func CheckSavePath(path string, opts SaveOptions) error {
	if path == "" {
		return errors.New("onnx: empty output path")
	}
	if opts.Input != "" && samePath(opts.Input, path) && !opts.Overwrite {
		return fmt.Errorf("%w %s (choose another output path)", ErrOverwriteInput, path)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("onnx: output %s is a directory, not a file path", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("onnx: output folder %s of %s does not exist", dir, path)
	}
	if !st.IsDir() {
		return fmt.Errorf("onnx: output folder %s of %s is not a directory", dir, path)
	}
	return nil
}

func saveExternal(m *onnxpb.ModelProto, path string, opts SaveOptions) error {
	min := opts.ExternalMin
	if min <= 0 {
		min = 1024
	}
	m = CloneShared(m) // the copy's tensors are re-pointed below; m is untouched
	dataName := filepath.Base(path) + ".data"
	var moved [][]byte
	off := 0
	for _, t := range m.Graph.Initializer {
		if len(t.RawData) < min {
			continue
		}
		off = (off + 63) &^ 63 // keep tensors aligned for mmap readers
		loc := onnxpb.TensorProto_EXTERNAL
		t.DataLocation = &loc
		t.ExternalData = []*onnxpb.StringStringEntryProto{
			kvEntry("location", dataName),
			kvEntry("offset", strconv.Itoa(off)),
			kvEntry("length", strconv.Itoa(len(t.RawData))),
		}
		moved = append(moved, t.RawData)
		off += len(t.RawData)
		t.RawData = nil
	}
	writeModel := func() error {
		return writeAtomic(path, func(w io.Writer) error { return encodeStream(w, m) })
	}
	if len(moved) == 0 { // nothing large enough: no data file to write
		return writeModel()
	}
	dataPath := filepath.Join(filepath.Dir(path), dataName)
	_, statErr := os.Lstat(dataPath)
	existed := statErr == nil
	err := writeAtomic(dataPath, func(w io.Writer) error {
		var pad [64]byte
		n := 0
		for _, b := range moved {
			if p := (64 - n%64) % 64; p > 0 {
				if _, err := w.Write(pad[:p]); err != nil {
					return err
				}
				n += p
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
			n += len(b)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := writeModel(); err != nil {
		if !existed { // leave no half-saved model behind
			os.Remove(dataPath)
		}
		return err
	}
	return nil
}

func kvEntry(k, v string) *onnxpb.StringStringEntryProto {
	return &onnxpb.StringStringEntryProto{Key: &k, Value: &v}
}

// samePath reports whether a and b name the same file (or the same path if
// neither exists).
func samePath(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb)
	}
	aa, _ := filepath.Abs(a)
	ab, _ := filepath.Abs(b)
	return aa == ab
}

// writeAtomic writes the content fill produces to path atomically
// (internal/fsutil), its errors prefixed "onnx: ".
func writeAtomic(path string, fill func(io.Writer) error) error {
	if err := fsutil.WriteAtomic(path, fill); err != nil {
		return fmt.Errorf("onnx: %w", err)
	}
	return nil
}

// writeFileAtomic is writeAtomic with data as the content.
func writeFileAtomic(path string, data []byte) error {
	if err := fsutil.WriteFileAtomic(path, data); err != nil {
		return fmt.Errorf("onnx: %w", err)
	}
	return nil
}
