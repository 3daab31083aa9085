"""Independent check of embed's Parquet output with pyarrow (test tooling
only: the product writes Parquet in Go).

    read_parquet.py VECS.npy VECS.ids.txt FILE.parquet [FILE.parquet ...]

reads the Parquet files in order as one table and checks that it is what
`convert embed` documents: columns id (string) and embedding (a list of
float32), no nulls, and exactly the ids (in order) and the vectors (bit
for bit) of the .npy output and its ids file of the same run. It prints
one line, "ok: N rows of dimension D in K files (pyarrow V)", and exits 0;
anything else exits 1 naming what differs.

The Go test TestEmbedParquetReadByPyarrow (cmd/convert) runs it with the
python of .tools/onnx-venv (python3 testdata/spec/check_spec.py --venv
installs the pins of testdata/fixtures/onnx_venv.py there, pyarrow
among them).
"""
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def fail(msg):
    print("read_parquet.py: " + msg, file=sys.stderr)
    sys.exit(1)


def main(argv):
    if len(argv) < 4:
        fail("usage: read_parquet.py VECS.npy VECS.ids.txt FILE.parquet...")
    want = np.load(argv[1])
    with open(argv[2], encoding="utf-8") as f:
        want_ids = f.read().split("\n")[:-1]
    tables = [pq.read_table(p) for p in argv[3:]]
    table = pa.concat_tables(tables)
    schema = table.schema
    if schema.names != ["id", "embedding"]:
        fail("columns %s, want ['id', 'embedding']" % schema.names)
    if schema.field("id").type != pa.string():
        fail("id is %s, want string" % schema.field("id").type)
    emb = schema.field("embedding").type
    if not pa.types.is_list(emb) or emb.value_type != pa.float32():
        fail("embedding is %s, want a list of float" % emb)
    if table.column("id").null_count or table.column("embedding").null_count:
        fail("nulls in the table")
    ids = table.column("id").to_pylist()
    if ids != want_ids:
        fail("ids differ from the ids file (%d against %d)" % (len(ids), len(want_ids)))
    col = table.column("embedding").combine_chunks()
    lengths = col.value_lengths().to_numpy(zero_copy_only=False)
    if want.dtype != np.float32 or want.ndim != 2 or len(ids) != want.shape[0]:
        fail("the .npy is %s %s for %d ids" % (want.dtype, want.shape, len(ids)))
    if len(lengths) and (lengths != want.shape[1]).any():
        fail("vectors of %s values, want %d" % (sorted(set(lengths.tolist())), want.shape[1]))
    got = col.flatten().to_numpy(zero_copy_only=False).reshape(want.shape)
    diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    if len(diff):
        i = diff[0]
        fail("%d values differ in their bits from the .npy; the first, value %d of %s: %r against %r"
             % (len(diff), i % want.shape[1], ids[i // want.shape[1]], got.flat[i], want.flat[i]))
    print("ok: %d rows of dimension %d in %d files (pyarrow %s)" % (want.shape[0], want.shape[1], len(tables), pa.__version__))


if __name__ == "__main__":
    main(sys.argv)
