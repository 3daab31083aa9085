package embed

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// goldenDim and goldenPartSize shape the folders of goldenRun.
const goldenDim, goldenPartSize = 4, 3

// goldenDoc is one input record of goldenRun's corpus.
type goldenDoc struct {
	rec  int64
	id   string
	bad  bool // skipped (--skip-bad-docs)
	ids  []string
	vecs [][]float32
}

// goldenCorpus is a seeded corpus of 15 input records: 11 documents in
// chunks mode (1 to 3 vectors each, ids "docid#k"), ids that JSON must
// escape or that are not ASCII, and 4 bad documents, two of them after
// the last good one (counted only by the complete manifest).
func goldenCorpus() []goldenDoc {
	r := rand.New(rand.NewPCG(32, 2026))
	// Parts of 3: the first and last ids of each (which the manifest
	// lists) are the ones JSON escapes or that are not ASCII.
	names := []string{"a<b>&c", "d02", "line\u2028sep", "é-ü", "d05", "p\u2029q", "\"q\"\\", "d08", "tab\tgt>", "d10", "日本"}
	var out []goldenDoc
	rec := int64(0)
	for i, name := range names {
		if i == 3 || i == 8 {
			rec++
			out = append(out, goldenDoc{rec: rec, id: fmt.Sprint("bad", i), bad: true})
		}
		rec++
		d := goldenDoc{rec: rec, id: name}
		for k := range 1 + (i*7)%3 {
			v := make([]float32, goldenDim)
			for j := range v {
				v[j] = float32(r.NormFloat64())
			}
			d.ids = append(d.ids, fmt.Sprintf("%s#%d", name, k))
			d.vecs = append(d.vecs, v)
		}
		out = append(out, d)
	}
	for range 2 {
		rec++
		out = append(out, goldenDoc{rec: rec, id: fmt.Sprint("bad-tail", rec), bad: true})
	}
	return out
}

// goldenHead is the manifest head of goldenRun's folders.
func goldenHead(f PartFormat) Manifest {
	return Manifest{Tool: "golden", Model: FileSum{File: "m.onnx", SHA256: "5e" + fmt.Sprintf("%062d", 0)},
		Tokenizer: []FileSum{{File: "tokenizer.json", SHA256: fmt.Sprintf("%064d", 7)}},
		Settings: Settings{Input: "--jsonl corpus.jsonl", Mode: Chunks, Pooling: PoolMean, Normalised: true, Window: 128,
			Output: "last_hidden_state", Dim: goldenDim, Backend: "native", SkipBad: true, PartSize: goldenPartSize, PartFormat: f}}
}

// feedGolden hands w the records of docs (every record: good ones added,
// bad ones skipped).
func feedGolden(t testing.TB, w *PartWriter, docs []goldenDoc) {
	t.Helper()
	for _, d := range docs {
		if d.bad {
			w.Skip()
			continue
		}
		if err := w.Add(d.rec, d.id, d.ids, d.vecs); err != nil {
			t.Fatal(err)
		}
	}
}

// goldenDir holds the manifests of goldenCorpus written by the writer
// before part records existed (commit afb6009's embed/parts.go, each
// part committed with the whole manifest), which pin the bytes of a
// complete folder to that version's and are never rewritten by the code
// under test: manifest-npy.json and manifest-parquet.json, the complete
// folders, and manifest-npy-2parts.json,
// that version's folder after goldenCut records (two parts, not
// complete: a folder made before the upgrade, which no writer makes
// now).
const goldenDir = "testdata/parts"

// goldenCut is the records of goldenCorpus through its second part.
const goldenCut = 7
