package embed

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// Vectors in Parquet: one row per vector, two columns,
//
//	id         string          (required binary, logical type STRING)
//	embedding  list<float32>   (required group, logical type LIST, of
//	                            required float elements: the standard
//	                            three-level list)
//
// which pyarrow reads as list<element: float not null>, pandas as
// arrays of float32, DuckDB as FLOAT[] and Spark as array<float>. The
// file is deterministic, the same vectors giving the same bytes: no
// timestamp or writer version in it (created_by is "linearize"),
// Snappy compression, PLAIN encoding, version 1 data pages, and row
// groups of parquetGroupValues values (rows = parquetGroupValues / dim),
// however the rows were handed to the writer.

// parquetRow is one row of a vectors file.
type parquetRow struct {
	ID        string    `parquet:"id"`
	Embedding []float32 `parquet:"embedding,list"`
}

// parquetCreatedBy is the created_by of the files written.
const parquetCreatedBy = "linearize"

// parquetGroupValues is the float32 values per row group (32 MiB).
const parquetGroupValues = 8 << 20

// ParquetRowGroupRows is the rows per row group of a vectors file of
// dimension dim: 8 Mi values' worth (32 MiB of vectors), at least 1.
func ParquetRowGroupRows(dim int) int {
	return max(1, parquetGroupValues/max(dim, 1))
}

// parquetSchema is the schema of a vectors file.
var parquetSchema = parquet.SchemaOf(parquetRow{})

// ParquetWriter writes vectors and their ids as a Parquet file (see the
// layout above), a row group at a time: memory holds one row group.
type ParquetWriter struct {
	w   *parquet.GenericWriter[parquetRow]
	dim int
	row [1]parquetRow
}

// NewParquetWriter is a writer of vectors of dimension dim to w.
func NewParquetWriter(w io.Writer, dim int) *ParquetWriter {
	return &ParquetWriter{dim: dim, w: parquet.NewGenericWriter[parquetRow](w,
		&parquet.WriterConfig{CreatedBy: parquetCreatedBy},
		parquet.Compression(&parquet.Snappy),
		parquet.DataPageVersion(1),
		parquet.MaxRowsPerRowGroup(int64(ParquetRowGroupRows(dim))))}
}

// Write adds the vectors vecs (row-major, dim values each), one per id.
func (p *ParquetWriter) Write(ids []string, vecs []float32) error {
	if len(vecs) != len(ids)*p.dim {
		return fmt.Errorf("embed: parquet: %d values for %d ids of dimension %d", len(vecs), len(ids), p.dim)
	}
	// A row at a time: the writer cuts pages where its buffer fills
	// after a write, so rows handed in other batches would be cut
	// elsewhere and give other bytes.
	for i, id := range ids {
		p.row[0] = parquetRow{ID: id, Embedding: vecs[i*p.dim : (i+1)*p.dim : (i+1)*p.dim]}
		if _, err := p.w.Write(p.row[:]); err != nil {
			return fmt.Errorf("embed: parquet: %w", err)
		}
	}
	p.row[0] = parquetRow{}
	return nil
}

// Close writes the last row group and the footer; it does not close the
// io.Writer.
func (p *ParquetWriter) Close() error {
	if err := p.w.Close(); err != nil {
		return fmt.Errorf("embed: parquet: %w", err)
	}
	return nil
}

// EncodeParquet is the Parquet file of the vectors vecs (row-major, dim
// values each) and their ids.
func EncodeParquet(w io.Writer, ids []string, vecs []float32, dim int) error {
	p := NewParquetWriter(w, dim)
	if err := p.Write(ids, vecs); err != nil {
		return err
	}
	return p.Close()
}

// ReadParquet reads a vectors file of size bytes written by
// ParquetWriter: its ids and its vectors, row-major. The file must have
// exactly that schema, every vector dim values and every id a line of
// text (not empty, no line break); want is the number of rows it must
// hold (-1: any).
func ReadParquet(r io.ReaderAt, size int64, dim int, want int64) (ids []string, vecs []float32, err error) {
	f, err := parquet.OpenFile(r, size)
	if err != nil {
		return nil, nil, fmt.Errorf("embed: parquet: %w", err)
	}
	if !parquet.EqualNodes(f.Schema(), parquetSchema) {
		return nil, nil, fmt.Errorf("embed: parquet: schema %s, want %s", strings.TrimSpace(f.Schema().String()), strings.TrimSpace(parquetSchema.String()))
	}
	n := f.NumRows()
	if want >= 0 && n != want {
		return nil, nil, fmt.Errorf("embed: parquet: %d rows, want %d", n, want)
	}
	if n > int64(maxDocsRead) || n*int64(dim) > int64(maxValuesRead) {
		return nil, nil, fmt.Errorf("embed: parquet: %d rows of %d values: more than one read holds", n, dim)
	}
	rd := parquet.NewGenericReader[parquetRow](f)
	defer rd.Close()
	ids = make([]string, 0, n)
	vecs = make([]float32, 0, n*int64(dim))
	buf := make([]parquetRow, 256)
	for int64(len(ids)) < n {
		k, err := rd.Read(buf)
		for _, row := range buf[:k] {
			if len(row.Embedding) != dim {
				return nil, nil, fmt.Errorf("embed: parquet: row %d: a vector of %d values, want %d", len(ids), len(row.Embedding), dim)
			}
			if row.ID == "" || strings.ContainsAny(row.ID, "\r\n") {
				return nil, nil, fmt.Errorf("embed: parquet: row %d: id %q is empty or has a line break", len(ids), row.ID)
			}
			ids = append(ids, strings.Clone(row.ID))
			vecs = append(vecs, row.Embedding...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("embed: parquet: %w", err)
		}
		if k == 0 {
			break
		}
	}
	if int64(len(ids)) != n {
		return nil, nil, fmt.Errorf("embed: parquet: read %d of %d rows", len(ids), n)
	}
	return ids, vecs, nil
}

// Bounds on what one ReadParquet holds: a part, not a corpus.
const (
	maxDocsRead   = 1 << 26
	maxValuesRead = 1 << 30
)
