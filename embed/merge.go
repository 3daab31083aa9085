package embed

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"encoding/binary"

	"github.com/linearize/linearize/internal/fsutil"
)

// Verified is what VerifyParts checked: folders of parts that belong
// together, in the order given.
type Verified struct {
	Dirs      []string
	Manifests []*Manifest
	// Documents and Vectors are the totals over every folder.
	Documents, Vectors int
	// Shards is n when the folders are the n shards of one corpus, else 0.
	Shards int
}

// VerifyParts checks that the folders of parts dirs are one corpus's
// vectors: every manifest complete; the same model, tokenizer and
// settings in each (the shard and the part size aside); when sharded,
// shards 0…n−1 of one n, each once; every part's files present, with the
// SHA-256, the vectors and the ids the manifest lists; and every vector
// id (a document id, or "docid#k" in chunks mode) exactly once over all
// the folders. It reads one part at a time; the id check holds 16 bytes
// per id.
func VerifyParts(dirs []string) (*Verified, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("embed: no folders to verify")
	}
	v := &Verified{Dirs: dirs}
	for _, d := range dirs {
		m, err := ReadManifest(d)
		if err != nil {
			return nil, err
		}
		if m == nil {
			return nil, fmt.Errorf("embed: %s: no %s (not a folder of parts)", d, ManifestName)
		}
		if !m.Complete {
			return nil, fmt.Errorf("embed: %s is not complete (%d documents in %d parts so far): run the same embed command again to finish it", d, m.Documents, len(m.Parts))
		}
		if len(v.Manifests) > 0 {
			if diff := Diff(m, v.Manifests[0], "shard", "part_size"); len(diff) > 0 {
				return nil, fmt.Errorf("embed: %s and %s were made otherwise: %s", d, dirs[0], strings.ReplaceAll(strings.Join(diff, "; "), "in the manifest", "in "+dirs[0]))
			}
		}
		v.Manifests = append(v.Manifests, m)
	}
	if err := v.checkShards(); err != nil {
		return nil, err
	}
	seen := map[[16]byte]string{}
	for i, m := range v.Manifests {
		for _, p := range m.Parts {
			ids, _, err := ReadPart(dirs[i], p, m.Settings.Dim)
			if err != nil {
				return nil, err
			}
			for _, id := range ids {
				h := sha256.Sum256([]byte(id))
				var k [16]byte
				copy(k[:], h[:16])
				if prev, dup := seen[k]; dup {
					return nil, fmt.Errorf("embed: id %q appears twice: in %s and in %s/%s", id, prev, dirs[i], p.Name)
				}
				seen[k] = dirs[i] + "/" + p.Name
			}
		}
		v.Documents += m.Documents
		v.Vectors += m.Vectors
	}
	return v, nil
}

// checkShards: one unsharded folder, or shards 0…n−1 of one n, each
// once.
func (v *Verified) checkShards() error {
	n, have := 0, map[int]string{}
	for i, m := range v.Manifests {
		if m.Settings.Shard == "" {
			if len(v.Manifests) > 1 {
				return fmt.Errorf("embed: %s is not a shard: only the shards of one run merge", v.Dirs[i])
			}
			return nil
		}
		si, sn, err := ParseShard(m.Settings.Shard)
		if err != nil {
			return fmt.Errorf("embed: %s: %w", v.Dirs[i], err)
		}
		if n != 0 && sn != n {
			return fmt.Errorf("embed: %s is shard %s, %s a shard of %d", v.Dirs[i], m.Settings.Shard, v.Dirs[0], n)
		}
		n = sn
		if prev, dup := have[si]; dup {
			return fmt.Errorf("embed: %s and %s are both shard %s", prev, v.Dirs[i], m.Settings.Shard)
		}
		have[si] = v.Dirs[i]
	}
	var missing []string
	for i := range n {
		if have[i] == "" {
			missing = append(missing, fmt.Sprintf("%d/%d", i, n))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("embed: shards missing: %s", strings.Join(missing, ", "))
	}
	v.Shards = n
	return nil
}

// ReadPart reads a part of the folder dir: its ids and its vectors
// (row-major, dim each), after checking both files' SHA-256 and their
// counts against the manifest's entry p.
func ReadPart(dir string, p Part, dim int) ([]string, []float32, error) {
	if strings.ContainsAny(p.Name, `/\`) || p.Name == "" || p.Name[0] == '.' {
		return nil, nil, fmt.Errorf("embed: %s: part name %q", dir, p.Name)
	}
	npyPath, idsPath := filepath.Join(dir, p.Name+".npy"), filepath.Join(dir, p.Name+".ids.txt")
	bound := int64(len(NPYHeaderFloat32(p.Vectors, dim))) + 4*int64(p.Vectors)*int64(dim)
	npy, err := fsutil.ReadFile(npyPath, bound)
	if err != nil {
		return nil, nil, fmt.Errorf("embed: part %s: %w", p.Name, err)
	}
	ids, err := fsutil.ReadFile(idsPath, 64<<20)
	if err != nil {
		return nil, nil, fmt.Errorf("embed: part %s: %w", p.Name, err)
	}
	if sum(npy) != p.SHA256 || sum(ids) != p.IDsSHA256 {
		return nil, nil, fmt.Errorf("embed: %s: part %s's files do not have the SHA-256 the manifest lists (changed or damaged after they were written)", dir, p.Name)
	}
	head := NPYHeaderFloat32(p.Vectors, dim)
	if !bytes.HasPrefix(npy, head) || len(npy) != len(head)+4*p.Vectors*dim {
		return nil, nil, fmt.Errorf("embed: %s: %s is not float32 [%d, %d]", dir, npyPath, p.Vectors, dim)
	}
	list := strings.Split(strings.TrimSuffix(string(ids), "\n"), "\n")
	if len(list) != p.Vectors {
		return nil, nil, fmt.Errorf("embed: %s: %s has %d ids for %d vectors", dir, idsPath, len(list), p.Vectors)
	}
	raw := npy[len(head):]
	vecs := make([]float32, p.Vectors*dim)
	for i := range vecs {
		vecs[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return list, vecs, nil
}

// parts calls fn with every part of the verified folders in order: the
// shards in the order given, each's parts in order.
func (v *Verified) parts(fn func(dir string, p Part, ids []string, vecs []float32) error) error {
	for i, m := range v.Manifests {
		for _, p := range m.Parts {
			ids, vecs, err := ReadPart(v.Dirs[i], p, m.Settings.Dim)
			if err != nil {
				return err
			}
			if err := fn(v.Dirs[i], p, ids, vecs); err != nil {
				return err
			}
		}
	}
	return nil
}

// Merge writes the verified folders' vectors to out, one part in memory
// at a time: a folder (a new folder of parts, their order kept, with a
// manifest of no shard that lists the folders merged), OUT.npy and
// OUT.ids.txt (one set), or OUT.jsonl ({"id", "embedding"} per line).
func (v *Verified) Merge(out string) error {
	first := v.Manifests[0]
	dim := first.Settings.Dim
	switch {
	case strings.HasSuffix(out, ".npy"):
		npy := fsutil.SetFile{Path: out, Fill: func(w io.Writer) error {
			if _, err := w.Write(NPYHeaderFloat32(v.Vectors, dim)); err != nil {
				return err
			}
			return v.parts(func(_ string, _ Part, _ []string, vecs []float32) error {
				_, err := w.Write(EncodeNPYFloat32(vecs, 0, dim)[len(NPYHeaderFloat32(0, dim)):])
				return err
			})
		}}
		ids := fsutil.SetFile{Path: strings.TrimSuffix(out, ".npy") + ".ids.txt", Fill: func(w io.Writer) error {
			return v.parts(func(_ string, _ Part, ids []string, _ []float32) error {
				_, err := io.WriteString(w, strings.Join(ids, "\n")+"\n")
				return err
			})
		}}
		return fsutil.WriteSet(npy, ids)
	case strings.HasSuffix(out, ".jsonl"):
		return fsutil.WriteAtomic(out, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetEscapeHTML(false)
			return v.parts(func(_ string, _ Part, ids []string, vecs []float32) error {
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
		})
	}
	if m, err := ReadManifest(out); err != nil {
		return err
	} else if m != nil {
		return fmt.Errorf("embed: %s already holds parts: merge into a new folder", out)
	}
	head := *first
	head.Settings.Shard = ""
	head.MergedFrom = v.Dirs
	w, err := OpenParts(out, head)
	if err != nil {
		return err
	}
	w.m.MergedFrom = v.Dirs
	err = v.parts(func(_ string, p Part, ids []string, vecs []float32) error {
		for _, id := range ids {
			w.ids.WriteString(id)
			w.ids.WriteByte('\n')
		}
		w.vecs = append(w.vecs, vecs...)
		w.docs, w.first, w.last, w.skipped = p.Documents, p.FirstID, p.LastID, p.SkippedBad
		return w.flush(false)
	})
	if err != nil {
		return err
	}
	return w.flush(true)
}
