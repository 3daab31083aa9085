package embed

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
)

// The file formats of a vectors file, by the file's extension:
//
//	OUT.npy      float32 [vectors, dim], with the ids one per line in
//	             OUT.ids.txt (IDsPath), the two written as one set
//	OUT.jsonl    one {"id": ..., "embedding": [...]} object per line
//	OUT.parquet  columns id (string) and embedding (list<float32>): see
//	             ParquetWriter
var vectorsExts = []string{".npy", ".jsonl", ".parquet"}

// IsVectorsFile reports whether out names a vectors file: it ends in
// .npy, .jsonl or .parquet.
func IsVectorsFile(out string) bool {
	for _, ext := range vectorsExts {
		if strings.HasSuffix(out, ext) {
			return true
		}
	}
	return false
}

// IDsPath is the ids file beside the vectors file OUT.npy: OUT.ids.txt.
func IDsPath(out string) string { return strings.TrimSuffix(out, ".npy") + ".ids.txt" }

// WriteVectors writes n vectors of dimension dim to the vectors file out
// (its format is its extension, see IsVectorsFile) as one transaction:
// whatever fails or stops the write, out (and for .npy its ids file)
// keeps its old content or holds all the new. chunks hands yield the
// vectors in order, a chunk at a time (ids and their vectors,
// row-major); it may be called more than once (once per file of the
// set) and must hand the same vectors each time. Memory holds one chunk
// (and, for .parquet, one row group).
func WriteVectors(out string, n, dim int, chunks func(yield func(ids []string, vecs []float32) error) error) error {
	// count checks that chunks handed n vectors of dim values each.
	count := func(got *int, ids []string, vecs []float32) error {
		if len(vecs) != len(ids)*dim {
			return fmt.Errorf("embed: %d values for %d ids of dimension %d", len(vecs), len(ids), dim)
		}
		if *got += len(ids); *got > n {
			return fmt.Errorf("embed: more than the %d vectors announced", n)
		}
		return nil
	}
	done := func(got int) error {
		if got != n {
			return fmt.Errorf("embed: %d vectors, %d announced", got, n)
		}
		return nil
	}
	switch {
	case strings.HasSuffix(out, ".npy"):
		npy := fsutil.SetFile{Path: out, Fill: func(w io.Writer) error {
			if _, err := w.Write(NPYHeaderFloat32(n, dim)); err != nil {
				return err
			}
			got := 0
			err := chunks(func(ids []string, vecs []float32) error {
				if err := count(&got, ids, vecs); err != nil {
					return err
				}
				_, err := w.Write(EncodeNPYFloat32(vecs, 0, dim)[len(NPYHeaderFloat32(0, dim)):])
				return err
			})
			if err != nil {
				return err
			}
			return done(got)
		}}
		idsFile := fsutil.SetFile{Path: IDsPath(out), Fill: func(w io.Writer) error {
			return chunks(func(ids []string, _ []float32) error {
				for _, id := range ids {
					if _, err := io.WriteString(w, id+"\n"); err != nil {
						return err
					}
				}
				return nil
			})
		}}
		return fsutil.WriteSet(npy, idsFile)
	case strings.HasSuffix(out, ".jsonl"):
		return fsutil.WriteAtomic(out, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetEscapeHTML(false)
			got := 0
			err := chunks(func(ids []string, vecs []float32) error {
				if err := count(&got, ids, vecs); err != nil {
					return err
				}
				for i, id := range ids {
					rec := struct {
						ID        string    `json:"id"`
						Embedding []float32 `json:"embedding"`
					}{id, vecs[i*dim : (i+1)*dim]}
					if err := enc.Encode(rec); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			return done(got)
		})
	case strings.HasSuffix(out, ".parquet"):
		return fsutil.WriteAtomic(out, func(w io.Writer) error {
			p := NewParquetWriter(w, dim)
			got := 0
			err := chunks(func(ids []string, vecs []float32) error {
				if err := count(&got, ids, vecs); err != nil {
					return err
				}
				return p.Write(ids, vecs)
			})
			if err != nil {
				return err
			}
			if err := done(got); err != nil {
				return err
			}
			return p.Close()
		})
	}
	return fmt.Errorf("embed: %s: want a file ending in .npy, .jsonl or .parquet", out)
}

// FilePartsDir is the hidden folder of parts beside the vectors file out
// in which Write (`convert embed -o OUT`) builds it: ".OUT.parts" in out's
// folder. A run that stops keeps the parts finished there, and the next
// run with the same flags resumes after them.
func FilePartsDir(out string) string {
	return filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".parts")
}

// Assemble writes the vectors of the complete folder of parts dir (the
// hidden folder FilePartsDir(out) of one run) to the vectors file out as
// WriteVectors does, a part at a time, checking each part's SHA-256 as
// it reads it; then it removes dir. The ids are not checked for
// duplicates: the run that wrote the folder did that as it read them.
// A failure leaves dir (and out's old content) as they were; a failure
// to remove dir after out is written is not an error: the next run with
// the same flags finds the folder complete and assembles out again.
func Assemble(dir, out string) error {
	m, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	if m == nil {
		return fmt.Errorf("embed: %s: no %s (not a folder of parts)", dir, ManifestName)
	}
	if !m.Complete {
		return fmt.Errorf("embed: %s is not complete (%d documents in %d parts so far)", dir, m.Documents, len(m.Parts))
	}
	err = WriteVectors(out, m.Vectors, m.Settings.Dim, func(yield func(ids []string, vecs []float32) error) error {
		for _, p := range m.Parts {
			ids, vecs, err := m.ReadPart(dir, p)
			if err != nil {
				return err
			}
			if err := yield(ids, vecs); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	RemoveParts(dir)
	return nil
}

// RemoveParts removes the folder of parts dir: its manifest first, so
// that a removal cut short leaves no manifest that lists missing parts
// (what is left is resumed as nothing: the next run starts the folder
// anew).
func RemoveParts(dir string) {
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil && !os.IsNotExist(err) {
		return
	}
	os.RemoveAll(dir)
}
