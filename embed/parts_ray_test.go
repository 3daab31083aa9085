package embed

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// rayDriver runs the Ray recipe's PartWriter (recipes/ray/embed_ray.py)
// on the corpus of the JSON file argv[1], into argv[2]/whole, and again
// into argv[2]/cut-NNN for every N below the number of file operations
// of the whole run (each write_atomic and each os.remove), stopped
// before the N-th as a crash there would: every state a run of the
// recipe can leave. It prints that number.
const rayDriver = `
import json, os, sys
sys.path.insert(0, sys.argv[3])
import numpy as np
import embed_ray as er

class Crash(Exception):
    pass

spec = json.load(open(sys.argv[1], encoding="utf-8"))
root = sys.argv[2]
real_write, real_remove = er.write_atomic, os.remove

def run(folder, limit):
    os.makedirs(folder)
    ops = [0]
    def tick():
        if ops[0] == limit:
            raise Crash()
        ops[0] += 1
    def write(path, data):
        tick()
        real_write(path, data)
    def remove(path):
        tick()
        real_remove(path)
    er.write_atomic, os.remove = write, remove
    try:
        w = er.PartWriter(folder, spec["head"])
        for d in spec["docs"]:
            if d["bad"]:
                w.skip()
                continue
            w.add(d["rec"], d["id"], d["ids"], np.array(d["vecs"], dtype=np.float64).astype(np.float32))
        w.flush(True)
    except Crash:
        pass
    finally:
        er.write_atomic, os.remove = real_write, real_remove
    return ops[0]

total = run(os.path.join(root, "whole"), -1)
for n in range(total):
    run(os.path.join(root, "cut-%03d" % n), n)
print(total)
`

// TestRayRecipePartWriter: the Ray recipe's PartWriter follows the
// protocol of PartWriter. Its complete folder is byte for byte the one
// PartWriter writes for the same vectors and head (manifest.json
// included: ids that Go's JSON escapes, <>& and U+2028, are escaped
// alike). Stopped before each of its file operations, it leaves a
// folder that ReadManifest reads as the parts whole at that point (no
// manifest, then 0, 1, 2, 3 parts, then complete, in that order) and
// that PartWriter resumes to the uninterrupted folder. Skipped without
// .tools/ray-venv (scripts/ray-venv.sh), as TestRayRecipe is.
func TestRayRecipePartWriter(t *testing.T) {
	py, err := filepath.Abs(filepath.Join("..", ".tools", "ray-venv", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Skipf("the Ray venv is missing (%v): run bash scripts/ray-venv.sh", err)
	}
	recipe, err := filepath.Abs(filepath.Join("..", "recipes", "ray"))
	if err != nil {
		t.Fatal(err)
	}
	// Reading the script makes go test's cache depend on it.
	if _, err := os.ReadFile(filepath.Join(recipe, "embed_ray.py")); err != nil {
		t.Fatal(err)
	}
	head := goldenHead(PartNPY)
	type doc struct {
		Rec  int64       `json:"rec"`
		ID   string      `json:"id"`
		Bad  bool        `json:"bad"`
		IDs  []string    `json:"ids"`
		Vecs [][]float64 `json:"vecs"`
	}
	spec := struct {
		Head struct {
			Tool      string    `json:"tool"`
			Model     FileSum   `json:"model"`
			Tokenizer []FileSum `json:"tokenizer"`
			Settings  Settings  `json:"settings"`
		} `json:"head"`
		Docs []doc `json:"docs"`
	}{}
	spec.Head.Tool, spec.Head.Model, spec.Head.Tokenizer, spec.Head.Settings = head.Tool, head.Model, head.Tokenizer, head.Settings
	for _, d := range goldenCorpus() {
		x := doc{Rec: d.rec, ID: d.id, Bad: d.bad, IDs: d.ids}
		for _, v := range d.vecs {
			f := make([]float64, len(v))
			for i, y := range v {
				f[i] = float64(y) // exact: the recipe rounds back to float32
			}
			x.Vecs = append(x.Vecs, f)
		}
		spec.Docs = append(spec.Docs, x)
	}
	tmp := t.TempDir()
	specPath, driver := filepath.Join(tmp, "spec.json"), filepath.Join(tmp, "driver.py")
	b, err := json.Marshal(&spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(specPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(driver, []byte(rayDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(tmp, "out")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, driver, specPath, root, recipe).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("the driver: %v: %s", err, stderr)
	}
	total, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the driver printed %q", out)
	}

	_, full := goldenManifest(t, "manifest-npy.json")
	want := readDir(t, goldenFolder(t, PartNPY))
	sameFolder(t, "the recipe's whole run", filepath.Join(root, "whole"), want)

	// The states in order: nil, then k parts (0…3), then complete.
	states := []*Manifest{nil}
	for k := range len(full.Parts) {
		states = append(states, wantAfter(full, k))
	}
	states = append(states, full)
	at := 0
	for n := range total {
		dir := filepath.Join(root, fmt.Sprintf("cut-%03d", n))
		m, err := ReadManifest(dir)
		if err != nil {
			t.Fatalf("stopped before operation %d: %v", n, err)
		}
		for at < len(states) && !reflect.DeepEqual(m, states[at]) {
			at++
		}
		if at == len(states) {
			t.Fatalf("stopped before operation %d: read %+v, not a state that follows the one before", n, m)
		}
		resumeGolden(t, dir, PartNPY)
		sameFolder(t, fmt.Sprintf("stopped before operation %d and resumed", n), dir, want)
	}
	if at != len(states)-1 {
		t.Errorf("the cut folders went through states up to %d of %d", at, len(states)-1)
	}
	t.Logf("%d file operations; every stop reads as a state of the protocol and resumes", total)
}
