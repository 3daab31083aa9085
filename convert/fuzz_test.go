package convert

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// fuzzBERTs are small BERT graphs in every layout models.BERT writes, so
// the fuzzers start from graphs Detect matches.
func fuzzBERTs() []*onnxpb.ModelProto {
	var out []*onnxpb.ModelProto
	for _, c := range []struct {
		opset int
		kt    models.KTranspose
		sc    models.ScaleForm
	}{
		{17, models.KPerm0231, models.ScaleDiv},
		{11, models.KTwoStep, models.ScaleMul},
		{14, models.KPerm0231, models.ScaleQ},
	} {
		m, err := models.BERT(models.Config{Vocab: 20, Hidden: 8, Heads: 2, Layers: 1, Intermediate: 16,
			MaxPositions: 8, TypeVocab: 2, Opset: c.opset, Seed: 3, KTranspose: c.kt, Scale: c.sc})
		if err == nil {
			out = append(out, m)
		}
	}
	return out
}

// fuzzFiles returns the model files the fuzzers start from: the bundled
// fixtures and, when present, the onnxruntime fusion corpus, each at most
// maxBytes long.
func fuzzFiles(maxBytes int64) []string {
	var paths []string
	for _, pat := range []string{
		filepath.Join("..", "testdata", "fixtures", "*.onnx"),
		filepath.Join("..", "..", "shared", "corpus", "ort-fusion", "*.onnx"),
	} {
		ps, _ := filepath.Glob(pat)
		sort.Strings(ps)
		for _, p := range ps {
			if st, err := os.Stat(p); err == nil && st.Size() <= maxBytes {
				paths = append(paths, p)
			}
		}
	}
	return paths
}

// checkConversions runs Detect, Summarize, ModelDims, ExtendPositions,
// ToPerformer, ToLinformer, ToLocalPooled, ToLARA and ToHedgehog on a model that passed onnx.Validate. None may panic; a converted model must be valid,
// re-encode, hold one linear-attention node per converted block, and be
// (with twice) the same bytes when converted again; m itself must not
// change.
func checkConversions(t *testing.T, m *onnxpb.ModelProto, twice bool) {
	before, err := onnx.Encode(m)
	if err != nil {
		t.Fatalf("encoding the input: %v", err)
	}
	// Detect and the rewrites recover from a panic as a last resort and
	// return "convert: malformed graph: <panic>"; to the fuzzer that is
	// still a crash to fix.
	checkErr := func(what string, err error) {
		if err != nil && (!strings.HasPrefix(err.Error(), "convert: ") || strings.Contains(err.Error(), "malformed graph")) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	det, err := Detect(m)
	checkErr("Detect", err)
	if err == nil {
		if _, err := json.Marshal(det); err != nil { // inspect --json
			t.Fatalf("Detection does not encode as JSON: %v", err)
		}
		for _, b := range det.Blocks {
			if b.Convertible && (b.Heads < 1 || b.HeadDim < 1 || math.IsNaN(b.Scale) || math.IsInf(b.Scale, 0)) {
				t.Fatalf("block %d is convertible with heads %d, head dim %d, scale %v", b.Layer, b.Heads, b.HeadDim, b.Scale)
			}
		}
	}
	// What `convert inspect` and `extend-positions` run on a model.
	onnx.Summarize(m)
	if _, _, err := ModelDims(m); err != nil {
		checkErr("ModelDims", err)
	}
	if ext, _, err := ExtendPositions(m, ExtendOptions{MaxPositions: 40}); err == nil {
		if err := onnx.Validate(ext); err != nil {
			t.Fatalf("ExtendPositions wrote an invalid model: %v", err)
		}
	} else {
		checkErr("ExtendPositions", err)
	}
	if after, _ := onnx.Encode(m); !bytes.Equal(before, after) {
		t.Fatal("inspection or ExtendPositions modified the input model")
	}
	type conv struct {
		op  string
		run func() (*onnxpb.ModelProto, *Report, error)
	}
	for _, c := range []conv{
		{ops.PerformerOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToPerformer(m, PerformerOptions{Features: 4, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
		}},
		{ops.LinformerOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLinformer(m, LinformerOptions{Init: "gaussian", K: 3, MaxLen: 16, Seed: 1})
		}},
		{ops.LocalPooledOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(m, LocalPooledOptions{Block: 2, Segments: 2})
		}},
		{ops.LaraOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLARA(m, LaraOptions{Seed: 1})
		}},
		{ops.HedgehogOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToHedgehog(m, HedgehogOptions{Features: 4, Block: 2, Seed: 1})
		}},
	} {
		out, rep, err := c.run()
		if after, _ := onnx.Encode(m); !bytes.Equal(before, after) {
			t.Fatalf("%s: the input model was modified", c.op)
		}
		checkErr(c.op, err)
		if err != nil {
			continue
		}
		if _, err := json.Marshal(rep); err != nil { // performer/linformer --json
			t.Fatalf("%s: report does not encode as JSON: %v", c.op, err)
		}
		if err := onnx.Validate(out); err != nil {
			t.Fatalf("%s: the converted model is invalid: %v", c.op, err)
		}
		b, err := onnx.Encode(out)
		if err != nil {
			t.Fatalf("%s: encoding the converted model: %v", c.op, err)
		}
		back, err := onnx.Decode(b)
		if err != nil {
			t.Fatalf("%s: decoding the converted model: %v", c.op, err)
		}
		if err := onnx.Validate(back); err != nil {
			t.Fatalf("%s: the re-decoded model is invalid: %v", c.op, err)
		}
		n := 0
		for _, node := range out.Graph.Node {
			if node.GetDomain() == ops.Domain && node.GetOpType() == c.op {
				n++
			}
			// Transposes the rewrite adds must carry a true permutation.
			if p := onnx.AttrInts(node, "perm"); node.GetOpType() == "Transpose" && strings.HasPrefix(node.GetName(), "linearize/") && !isPerm(p) {
				t.Fatalf("%s: added Transpose %q has perm %v", c.op, node.GetName(), p)
			}
		}
		if n != ownConverted(rep) {
			t.Fatalf("%s: report lists %d blocks converted into it, graph holds %d %s nodes", c.op, ownConverted(rep), n, c.op)
		}
		if !twice {
			continue
		}
		again, _, err := c.run()
		if err != nil {
			t.Fatalf("%s: second conversion failed: %v", c.op, err)
		}
		if b2, _ := onnx.Encode(again); !bytes.Equal(b, b2) {
			t.Fatalf("%s: converting twice gave different bytes", c.op)
		}
	}
}

// FuzzDetect feeds arbitrary bytes through Decode and Validate to attention
// detection and both conversions.
func FuzzDetect(f *testing.F) {
	for _, m := range fuzzBERTs() {
		b, _ := onnx.Encode(m)
		f.Add(b)
	}
	for _, p := range fuzzFiles(16 << 10) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := onnx.Decode(data)
		if err != nil || onnx.Validate(m) != nil {
			return
		}
		checkConversions(t, m, true)
	})
}

// fuzzBases are the models FuzzConvertMutated edits: the small BERTs
// first (always present, so regression seeds keep their meaning), then the
// fixtures and corpus files.
func fuzzBases(tb testing.TB) []*onnxpb.ModelProto {
	bases := fuzzBERTs()
	for _, p := range fuzzFiles(160 << 10) {
		if m, err := onnx.Load(p); err == nil {
			bases = append(bases, m)
		}
	}
	return bases
}

var (
	fuzzInts   = []int64{-3, -2, -1, 0, 1, 2, 3, 4, 8, 16, 64, 1 << 20, math.MaxInt64, math.MinInt64}
	fuzzFloats = []float32{0, -1, 1, 0.125, 8, 1e30, -1e30, float32(math.NaN()), float32(math.Inf(1)), 1e-30}
	fuzzOps    = []string{"MatMul", "Softmax", "Transpose", "Reshape", "Add", "Mul", "Div", "Where", "Sqrt",
		"Identity", "Gemm", "Einsum", "Cast", "Unsqueeze", "Slice", "Attention", "MultiHeadAttention"}
)

// mutate applies the edits encoded in prog, three bytes each (what, which
// node or tensor, value), to m.
func mutate(m *onnxpb.ModelProto, prog []byte) {
	g := m.Graph
	for i := 0; i+2 < len(prog) && len(g.Node) > 0; i += 3 {
		what, a, v := prog[i], int(prog[i+1]), int(prog[i+2])
		n := g.Node[a%len(g.Node)]
		switch what % 10 {
		case 0: // rewire an input to another value
			if len(n.Input) > 0 {
				src := g.Node[v%len(g.Node)]
				if len(src.Output) > 0 {
					n.Input[v%len(n.Input)] = src.Output[0]
				}
			}
		case 1: // change an int or ints attribute
			if len(n.Attribute) > 0 {
				at := n.Attribute[v%len(n.Attribute)]
				x := fuzzInts[v%len(fuzzInts)]
				switch {
				case at.I != nil:
					at.I = &x
				case len(at.Ints) > 0:
					at.Ints[v%len(at.Ints)] = x
				}
			}
		case 2: // change a float attribute
			for _, at := range n.Attribute {
				if at.F != nil {
					x := fuzzFloats[v%len(fuzzFloats)]
					at.F = &x
				}
			}
		case 3: // change the op type
			op := fuzzOps[v%len(fuzzOps)]
			n.OpType = &op
		case 4: // drop or duplicate the last input
			if v%2 == 0 && len(n.Input) > 0 {
				n.Input = n.Input[:len(n.Input)-1]
			} else if len(n.Input) > 0 {
				n.Input = append(n.Input, n.Input[0])
			}
		case 5: // change one value of an initializer
			if len(g.Initializer) > 0 {
				tp := g.Initializer[a%len(g.Initializer)]
				if x, err := onnx.DecodeTensor(tp); err == nil {
					setElem(x, v)
					if nt, err := onnx.EncodeTensor(tp.GetName(), x); err == nil {
						g.Initializer[a%len(g.Initializer)] = nt
					}
				}
			}
		case 6: // swap two nodes (the list need not stay sorted)
			j := v % len(g.Node)
			k := a % len(g.Node)
			g.Node[j], g.Node[k] = g.Node[k], g.Node[j]
		case 7: // delete a node
			k := a % len(g.Node)
			g.Node = append(g.Node[:k:k], g.Node[k+1:]...)
		case 8: // reshape an initializer, keeping its size
			if len(g.Initializer) > 0 {
				tp := g.Initializer[a%len(g.Initializer)]
				if len(tp.Dims) >= 2 {
					tp.Dims[0], tp.Dims[len(tp.Dims)-1] = tp.Dims[len(tp.Dims)-1], tp.Dims[0]
				} else if len(tp.Dims) == 1 && v%2 == 0 {
					tp.Dims = []int64{1, tp.Dims[0]}
				} else {
					tp.Dims = nil
					if x, err := onnx.DecodeTensor(tp); err != nil || onnx.NumElements(x.Shape) != 1 {
						tp.Dims = []int64{1}
					}
				}
			}
		case 9: // change a value inside a Constant node
			for _, at := range n.Attribute {
				if at.T == nil {
					continue
				}
				if x, err := onnx.DecodeTensor(at.T); err == nil {
					setElem(x, v)
					if nt, err := onnx.EncodeTensor(at.T.GetName(), x); err == nil {
						at.T = nt
					}
				}
			}
		}
	}
}

// setElem sets one element of x, chosen by v, to a value chosen by v.
func setElem(x *onnx.Tensor, v int) {
	switch d := x.Data.(type) {
	case []int64:
		if len(d) > 0 {
			d[v%len(d)] = fuzzInts[v%len(fuzzInts)]
		}
	case []int32:
		if len(d) > 0 {
			d[v%len(d)] = int32(fuzzInts[v%len(fuzzInts)])
		}
	case []float32:
		if len(d) > 0 {
			d[v%len(d)] = fuzzFloats[v%len(fuzzFloats)]
		}
	}
}

// FuzzConvertMutated edits real attention graphs structurally (rewired
// inputs, changed permutations, axes, scales, op types, shape constants,
// deleted or reordered nodes) so that most inputs still decode and
// validate, and checks detection and conversion on them.
func FuzzConvertMutated(f *testing.F) {
	bases := fuzzBases(f)
	for i := range bases {
		f.Add(uint8(i), []byte{})
	}
	f.Add(uint8(0), []byte{1, 5, 3, 9, 2, 4})
	f.Add(uint8(1), []byte{3, 7, 1, 6, 2, 9, 0, 4, 4})
	f.Fuzz(func(t *testing.T, base uint8, prog []byte) {
		if len(prog) > 30 {
			prog = prog[:30]
		}
		m := proto.Clone(bases[int(base)%len(bases)]).(*onnxpb.ModelProto)
		mutate(m, prog)
		if onnx.Validate(m) != nil {
			return
		}
		checkConversions(t, m, false)
	})
}
