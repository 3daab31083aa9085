package embed

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// parquetVectors is n vectors of dimension dim (ids "d0"…) with values
// that a rounding would change: negative zero, subnormals, the largest
// float32, a value just above 1.
func parquetVectors(n, dim int) ([]string, []float32) {
	ids := make([]string, n)
	vecs := make([]float32, n*dim)
	special := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.MaxFloat32, math.Nextafter32(1, 2)}
	for i := range ids {
		ids[i] = fmt.Sprintf("d%d é", i)
		for j := range dim {
			k := i*dim + j
			vecs[k] = float32(math.Sin(float64(k))) / 3
			if k%17 == 0 {
				vecs[k] = special[(k/17)%len(special)]
			}
		}
	}
	return ids, vecs
}

// TestParquetRoundTrip: what EncodeParquet writes, ReadParquet reads back
// bit for bit, over several row groups and in the schema documented
// (id: string, embedding: list<float>); the same vectors give the same
// bytes however they are handed to the writer; a file of another
// dimension, row count or schema is refused.
func TestParquetRoundTrip(t *testing.T) {
	for _, c := range []struct{ n, dim int }{
		{1, 1}, {3, 4}, {1000, 384}, {ParquetRowGroupRows(1000)*2 + 5, 1000},
	} {
		t.Run(fmt.Sprintf("%dx%d", c.n, c.dim), func(t *testing.T) {
			ids, vecs := parquetVectors(c.n, c.dim)
			var whole bytes.Buffer
			if err := EncodeParquet(&whole, ids, vecs, c.dim); err != nil {
				t.Fatal(err)
			}
			gotIDs, gotVecs, err := ReadParquet(bytes.NewReader(whole.Bytes()), int64(whole.Len()), c.dim, int64(c.n))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(gotIDs) != fmt.Sprint(ids) {
				t.Errorf("ids %.80v…, want %.80v…", gotIDs, ids)
			}
			for i := range vecs {
				if math.Float32bits(gotVecs[i]) != math.Float32bits(vecs[i]) {
					t.Fatalf("value %d: %g (bits %#x), want %g (bits %#x)", i, gotVecs[i], math.Float32bits(gotVecs[i]), vecs[i], math.Float32bits(vecs[i]))
				}
			}
			// Handed a row at a time: the same bytes.
			var rows bytes.Buffer
			p := NewParquetWriter(&rows, c.dim)
			for i := range ids {
				if err := p.Write(ids[i:i+1], vecs[i*c.dim:(i+1)*c.dim]); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rows.Bytes(), whole.Bytes()) {
				t.Errorf("written a row at a time: %d bytes, differing from the %d written at once", rows.Len(), whole.Len())
			}
			f, err := parquet.OpenFile(bytes.NewReader(whole.Bytes()), int64(whole.Len()))
			if err != nil {
				t.Fatal(err)
			}
			groups := (c.n + ParquetRowGroupRows(c.dim) - 1) / ParquetRowGroupRows(c.dim)
			if len(f.RowGroups()) != groups {
				t.Errorf("%d row groups, want %d", len(f.RowGroups()), groups)
			}
			if md := f.Metadata(); md.CreatedBy != "linearize" {
				t.Errorf("created_by %q", md.CreatedBy)
			}
			if _, _, err := ReadParquet(bytes.NewReader(whole.Bytes()), int64(whole.Len()), c.dim+1, -1); err == nil {
				t.Error("read with another dimension")
			}
			if _, _, err := ReadParquet(bytes.NewReader(whole.Bytes()), int64(whole.Len()), c.dim, int64(c.n+1)); err == nil || !strings.Contains(err.Error(), "rows, want") {
				t.Errorf("read with another row count: %v", err)
			}
		})
	}
	want := `message parquetRow {
	required binary id (STRING);
	required group embedding (LIST) {
		repeated group list {
			required float element;
		}
	}
}`
	if got := parquetSchema.String(); got != want {
		t.Errorf("schema\n%s\nwant\n%s", got, want)
	}
	// Another schema: refused naming it.
	var other bytes.Buffer
	type row struct {
		ID string `parquet:"id"`
		X  []int  `parquet:"embedding,list"`
	}
	if err := parquet.Write(&other, []row{{"a", []int{1}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadParquet(bytes.NewReader(other.Bytes()), int64(other.Len()), 1, -1); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Errorf("another schema: %v", err)
	}
}

// TestParquetPartsResumeAndMerge: a folder of Parquet parts resumes as
// a folder of .npy parts does (byte for byte the folder of an
// uninterrupted run, manifest format /2, part_format parquet), verifies,
// and merges into .parquet, .npy and .jsonl files and a folder; a
// damaged part is refused by its SHA-256.
func TestParquetPartsResumeAndMerge(t *testing.T) {
	head := partsHead(2, "")
	head.Settings.PartFormat = PartParquet
	whole, cut := t.TempDir(), t.TempDir()
	w, err := OpenParts(whole, head)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, w, 1, 7)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	w, _ = OpenParts(cut, head)
	writeDocs(t, w, 1, 5)
	w, err = OpenParts(cut, head)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := w.Resume(); rec != 4 {
		t.Fatalf("resume at %d, want 4", rec)
	}
	writeDocs(t, w, 5, 7)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	a, b := readDir(t, whole), readDir(t, cut)
	if fmt.Sprint(a) != fmt.Sprint(b) || len(a) != 5 {
		t.Errorf("resumed folder differs from the whole run: %d files vs %d", len(b), len(a))
	}
	if !strings.Contains(a[ManifestName], `"format": "linearize-embed-parts/2"`) || !strings.Contains(a[ManifestName], `"part_format": "parquet"`) ||
		strings.Contains(a[ManifestName], "ids_sha256") {
		t.Errorf("manifest:\n%s", a[ManifestName])
	}
	// Resuming with .npy parts is refused naming the format.
	npyHead := partsHead(2, "")
	if _, err := OpenParts(cut, npyHead); err == nil || !strings.Contains(err.Error(), "part_format: npy here, parquet in the manifest") {
		t.Errorf("npy parts into a parquet folder: %v", err)
	}

	v, err := VerifyParts([]string{whole})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, out := range []string{"m.parquet", "m.npy", "m.jsonl", "folder"} {
		p := filepath.Join(root, out)
		if err := v.Merge(p); err != nil {
			t.Fatalf("merge into %s: %v", out, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "m.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	ids, vecs, err := ReadParquet(bytes.NewReader(data), int64(len(data)), 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if want := vec(i + 1); id != fmt.Sprint("d", i+1) || vecs[2*i] != want[0] || vecs[2*i+1] != want[1] {
			t.Errorf("row %d: %s %v", i, id, vecs[2*i:2*i+2])
		}
	}
	if got, _ := os.ReadFile(filepath.Join(root, "m.ids.txt")); string(got) != "d1\nd2\nd3\nd4\nd5\nd6\nd7\n" {
		t.Errorf("merged ids %q", got)
	}
	if fm, _ := ReadManifest(filepath.Join(root, "folder")); fm == nil || fm.Settings.PartFormat != PartParquet || fm.Documents != 7 {
		t.Errorf("merged folder: %+v", fm)
	}

	m, _ := ReadManifest(cut)
	p := filepath.Join(cut, m.Parts[1].Name+".parquet")
	data, _ = os.ReadFile(p)
	data[len(data)/2] ^= 1
	os.WriteFile(p, data, 0o644)
	if _, err := VerifyParts([]string{cut}); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("a damaged part: %v", err)
	}
}

// TestVerifyPartsFindsDuplicates: an id in two parts, or twice in one,
// is refused naming both places; the check confirms a hash match
// against the ids themselves.
func TestVerifyPartsFindsDuplicates(t *testing.T) {
	for _, c := range []struct {
		name string
		ids  []string
		want string
	}{
		{"two parts", []string{"a", "b", "c", "a"}, `id "a" appears twice: in DIR/part-00000 and in DIR/part-00001`},
		{"one part", []string{"a", "b", "b"}, `id "b" appears twice: in DIR/part-00000 and in DIR/part-00000`},
		{"none", []string{"a", "b", "c", "d", "e"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := OpenParts(dir, partsHead(3, ""))
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range c.ids {
				if err := w.Add(int64(i+1), id, []string{id}, [][]float32{vec(i)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			_, err = VerifyParts([]string{dir})
			want := strings.ReplaceAll(c.want, "DIR", dir)
			if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
				t.Errorf("got %v, want %q", err, want)
			}
		})
	}
}
