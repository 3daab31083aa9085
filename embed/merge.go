package embed

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/internal/idset"
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
// settings in each (the shard, the part size and the part format
// aside); when sharded, shards 0…n−1 of one n, each once; every part's
// files present, with the SHA-256, the vectors and the ids the manifest
// lists; and every vector id (a document id, or "docid#k" in chunks
// mode) exactly once over all the folders. It reads one part at a
// time; the id check holds an 8-byte fingerprint of each id (idset.Set: 11
// to 21 bytes an id), and an id whose fingerprint matches an earlier
// one's is looked for among the ids read before it, so the check is
// exact.
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
			if diff := Diff(m, v.Manifests[0], "shard", "part_size", "part_format"); len(diff) > 0 {
				return nil, fmt.Errorf("embed: %s and %s were made otherwise: %s", d, dirs[0], strings.ReplaceAll(strings.Join(diff, "; "), "in the manifest", "in "+dirs[0]))
			}
		}
		v.Manifests = append(v.Manifests, m)
	}
	if err := v.checkShards(); err != nil {
		return nil, err
	}
	var seen idset.Set
	defer seen.Free()
	for i, m := range v.Manifests {
		for k, p := range m.Parts {
			ids, _, err := m.ReadPart(dirs[i], p)
			if err != nil {
				return nil, err
			}
			for j, id := range ids {
				if !seen.Add(id) {
					continue
				}
				where, err := v.findID(id, i, k, ids[:j])
				if err != nil {
					return nil, err
				}
				if where != "" {
					return nil, fmt.Errorf("embed: id %q appears twice: in %s and in %s/%s", id, where, dirs[i], p.Name)
				}
				// Another id with the same fingerprint.
			}
		}
		v.Documents += m.Documents
		v.Vectors += m.Vectors
	}
	return v, nil
}

// findID is where id is among the ids read before it: the parts of the
// folders before folder i, those of folder i before part k, and before
// (the ids of part k before it); "" when it is in none.
func (v *Verified) findID(id string, i, k int, before []string) (string, error) {
	if slices.Contains(before, id) {
		return v.Dirs[i] + "/" + v.Manifests[i].Parts[k].Name, nil
	}
	for fi := 0; fi <= i; fi++ {
		m := v.Manifests[fi]
		for pk, p := range m.Parts {
			if fi == i && pk == k {
				return "", nil
			}
			ids, _, err := m.ReadPart(v.Dirs[fi], p)
			if err != nil {
				return "", err
			}
			if slices.Contains(ids, id) {
				return v.Dirs[fi] + "/" + p.Name, nil
			}
		}
	}
	return "", nil
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

// ReadPart reads the part p of the folder dir that m describes: its ids
// and its vectors (row-major, m.Settings.Dim each), after checking its
// files' SHA-256 and their counts against the manifest's entry.
func (m *Manifest) ReadPart(dir string, p Part) ([]string, []float32, error) {
	if strings.ContainsAny(p.Name, `/\`) || p.Name == "" || p.Name[0] == '.' {
		return nil, nil, fmt.Errorf("embed: %s: part name %q", dir, p.Name)
	}
	dim := m.Settings.Dim
	if m.Settings.PartFormat == PartParquet {
		path := filepath.Join(dir, p.Name+".parquet")
		// Snappy adds at most 1/6 and PLAIN 4 bytes a value; ids are at
		// most 64 MiB a part, as in an ids file.
		bound := 4*int64(p.Vectors)*int64(dim)*7/6 + 64<<20 + 64*int64(p.Vectors) + 1<<20
		data, err := fsutil.ReadFile(path, bound)
		if err != nil {
			return nil, nil, fmt.Errorf("embed: part %s: %w", p.Name, err)
		}
		if sum(data) != p.SHA256 {
			return nil, nil, fmt.Errorf("embed: %s: part %s's file does not have the SHA-256 the manifest lists (changed or damaged after it was written)", dir, p.Name)
		}
		ids, vecs, err := ReadParquet(bytes.NewReader(data), int64(len(data)), dim, int64(p.Vectors))
		if err != nil {
			return nil, nil, fmt.Errorf("%w (in %s)", err, path)
		}
		return ids, vecs, nil
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
			ids, vecs, err := m.ReadPart(v.Dirs[i], p)
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
// at a time: a folder (a new folder of parts of the first folder's part
// format, their order kept, with a manifest of no shard that lists the
// folders merged), or a file as WriteVectors writes it (OUT.npy and
// OUT.ids.txt, OUT.jsonl or OUT.parquet).
func (v *Verified) Merge(out string) error {
	first := v.Manifests[0]
	if IsVectorsFile(out) {
		return WriteVectors(out, v.Vectors, first.Settings.Dim, func(yield func(ids []string, vecs []float32) error) error {
			return v.parts(func(_ string, _ Part, ids []string, vecs []float32) error { return yield(ids, vecs) })
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
