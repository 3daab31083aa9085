package convert

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// syntheticMoments returns calibration moments for every block of m,
// accumulated from seeded random sequences with shared query/key means (so
// the fitted balance is far from the identity).
func syntheticMoments(t *testing.T, m *onnxpb.ModelProto, center bool, seed uint64) map[int]*features.Moments {
	t.Helper()
	det, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	out := map[int]*features.Moments{}
	for _, b := range det.Blocks {
		mo, err := features.NewMoments(b.Heads, b.HeadDim, center, features.WeightAttention)
		if err != nil {
			t.Fatal(err)
		}
		d, n := b.HeadDim, 10
		for h := 0; h < b.Heads; h++ {
			for range 3 {
				q, k := make([]float64, n*d), make([]float64, n*d)
				for i := range q {
					q[i] = 1 + float64(i%d)/float64(d) + rng.NormFloat64()*(0.5+float64(i%3))
					k[i] = -0.5 + rng.NormFloat64()/(1+float64(i%4))
				}
				if err := mo.AddSequence(h, q, k, n, nil, b.Scale); err != nil {
					t.Fatal(err)
				}
			}
		}
		out[b.Layer] = mo
	}
	return out
}

type perfVariant struct {
	center, balance bool
	feat            ops.FeatureMap
}

func (v perfVariant) String() string {
	return fmt.Sprintf("center=%v/balance=%v/%s", v.center, v.balance, v.feat)
}

// centring is the explicit Center of a variant's centre flag.
func centring(on bool) Centring {
	if on {
		return CenterOn
	}
	return CenterOff
}

func (v perfVariant) options(t *testing.T, m *onnxpb.ModelProto, seed uint64) PerformerOptions {
	o := PerformerOptions{Features: 32, Seed: seed, Center: centring(v.center), Balance: v.balance, FeatureMap: v.feat}
	if v.balance || v.feat == ops.FeaturesSDERF || v.feat == ops.FeaturesADERF {
		o.Moments = syntheticMoments(t, m, v.center, 9)
	}
	return o
}

var perfVariants = []perfVariant{
	{true, false, ops.FeaturesFavorPlus},
	{true, true, ops.FeaturesFavorPlus},
	{false, false, ops.FeaturesFavorPP},
	{true, true, ops.FeaturesFavorPP},
	{true, false, ops.FeaturesSDERF},
	{true, false, ops.FeaturesADERF},
	{false, false, ops.FeaturesADERF},
}

// Every Performer variant converts the fixtures (unfused, fused, several
// opsets), passes validate (function body in onnxruntime vs Go kernel on
// the model's own activations), and keeps the padding invariance: 5 real
// tokens padded to 8 give the same outputs as the 5 alone.
func TestPerformerVariantsOnFixtures(t *testing.T) {
	needORT(t)
	for _, f := range textFixtures(t) {
		m := loadModel(t, filepath.Join(fixtureDir, f.File))
		for _, v := range perfVariants {
			t.Run(f.File+"/"+v.String(), func(t *testing.T) {
				pm, rep, err := ToPerformer(m, v.options(t, m, 3))
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Converted) != f.Convertible {
					t.Fatalf("converted %d blocks, want %d: %+v", len(rep.Converted), f.Convertible, rep.Skipped)
				}
				validateORT(t, "", pm, fixtureFeeds(f, 2, 8, []int{8, 6}, 11), f.Convertible)
				checkPadding(t, v.String(), f, pm, 8)
			})
		}
	}
}

// The nodes carry the variant's attributes and inputs, the initializers
// have the op's shapes, the model holds the variant's function, and the
// same options give byte-identical models.
func TestToPerformerVariantGraph(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtureDir, "bert_eager_op14.onnx"))
	for _, v := range perfVariants {
		t.Run(v.String(), func(t *testing.T) {
			o := v.options(t, m, 4)
			pm, rep, err := ToPerformer(m, o)
			if err != nil {
				t.Fatal(err)
			}
			again, _, err := ToPerformer(m, v.options(t, m, 4))
			if err != nil {
				t.Fatal(err)
			}
			a, _ := proto.MarshalOptions{Deterministic: true}.Marshal(pm)
			b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(again)
			if !bytes.Equal(a, b) {
				t.Error("same options, different bytes")
			}
			if rep.Options.Center != v.center || rep.Options.FeatureMap != v.feat {
				t.Errorf("report options %v", rep.Options)
			}
			ix := onnx.NewIndex(pm.Graph)
			derf := v.feat == ops.FeaturesSDERF || v.feat == ops.FeaturesADERF
			want := 5
			if v.balance || derf {
				want = 7
			}
			if derf {
				want = 8
			}
			nodes := 0
			for _, n := range pm.Graph.Node {
				if n.GetOpType() != ops.PerformerOp {
					continue
				}
				nodes++
				if len(n.Input) != want {
					t.Fatalf("node %s has %d inputs, want %d", n.GetName(), len(n.Input), want)
				}
				if got := onnx.AttrInt(n, "center", 0) != 0; got != v.center {
					t.Errorf("center attribute %v", got)
				}
				if got := ops.FeatureMap(onnx.AttrString(n, "features", string(ops.FeaturesFavorPlus))); got != v.feat {
					t.Errorf("features attribute %q", got)
				}
				h, d := rep.Converted[0].Heads, rep.Converted[0].HeadDim
				for i, shape := range [][]int{{h, d, d}, {h, d, d}, {h, 1, d}} {
					if 5+i >= len(n.Input) {
						break
					}
					tp := ix.Initializers[n.Input[5+i]]
					if tp == nil {
						t.Fatalf("input %d (%s) is not an initializer", 5+i, n.Input[5+i])
					}
					x, err := onnx.DecodeTensor(tp)
					if err != nil || fmt.Sprint(x.Shape) != fmt.Sprint(shape) {
						t.Errorf("input %d has shape %v, want %v (%v)", 5+i, x.Shape, shape, err)
					}
				}
				if v.feat == ops.FeaturesSDERF && n.Input[5] != n.Input[6] {
					t.Error("sderf: balance_q and balance_k are different initializers")
				}
			}
			if nodes != len(rep.Converted) {
				t.Errorf("%d nodes for %d converted blocks", nodes, len(rep.Converted))
			}
			fn, err := ops.PerformerFunctionFor(ops.PerformerVariant{Center: v.center, Balance: v.balance || derf, Features: v.feat}, onnx.OpsetVersion(pm, ""))
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, f := range pm.Functions {
				if f.GetName() == ops.PerformerOp {
					found = proto.Equal(f, fn)
				}
			}
			if !found {
				t.Error("the model does not hold the variant's function")
			}
		})
	}
	// The plain conversion is unchanged by the new options' defaults: the
	// node carries scale alone (kernel, epsilon and the variant
	// attributes are at the schema's defaults, which nodes leave off).
	plain, _, err := ToPerformer(m, PerformerOptions{Features: 16, Seed: 2, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range plain.Graph.Node {
		if n.GetOpType() == ops.PerformerOp && (len(n.Input) != 5 || len(n.Attribute) != 1 || n.Attribute[0].GetName() != "scale") {
			t.Errorf("plain node %s: %d inputs, %d attributes", n.GetName(), len(n.Input), len(n.Attribute))
		}
	}
}

func TestToPerformerVariantErrors(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtureDir, "bert_eager_op14.onnx"))
	mom := syntheticMoments(t, m, true, 1)
	bad := map[int]*features.Moments{}
	for l, mo := range mom {
		x, _ := features.NewMoments(mo.Heads+1, mo.Dim, true, features.WeightAttention)
		bad[l] = x
	}
	for _, c := range []struct {
		name string
		o    PerformerOptions
		want string
	}{
		{"balance without moments", PerformerOptions{Balance: true}, "calibration moments"},
		{"aderf without moments", PerformerOptions{FeatureMap: ops.FeaturesADERF}, "calibration moments"},
		{"aderf with balance", PerformerOptions{FeatureMap: ops.FeaturesADERF, Balance: true, Moments: mom, Center: CenterOn}, "own balance"},
		{"unknown map", PerformerOptions{FeatureMap: "relu"}, `feature map "relu"`},
		{"trig with center", PerformerOptions{Kernel: ops.KernelTrig, Center: CenterOn}, "positive kernel"},
		{"centred moments, uncentred op", PerformerOptions{Balance: true, Moments: mom, Center: CenterOff}, "centred true"},
		{"moments of other heads", PerformerOptions{Balance: true, Center: CenterOn, Moments: bad}, "heads"},
		{"layer without moments", PerformerOptions{Balance: true, Center: CenterOn, Moments: map[int]*features.Moments{}}, "no calibration moments for layer"},
	} {
		_, _, err := ToPerformer(m, c.o)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) || err.Error()[:8] != "convert:" {
			t.Errorf("%s: error %v, want one with %q and the package prefix", c.name, err, c.want)
		}
	}
}

// The zero value of PerformerOptions is `convert performer` without
// flags: 256 orthogonal χ features, positive kernel, centred, the feature
// map chosen from the other options. Each automatic conversion is
// byte-identical to the one with every documented default spelled out,
// and the report records the resolved values.
func TestPerformerZeroValueDefaults(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtureDir, "bert_eager_op14.onnx"))
	centred, uncentred := syntheticMoments(t, m, true, 1), syntheticMoments(t, m, false, 1)
	spelled := func(o PerformerOptions) PerformerOptions {
		o.Features, o.Chunk, o.Omega, o.Norms = 256, 64, features.Orthogonal, features.NormsChi
		if o.Kernel == "" {
			o.Kernel = ops.KernelPositive
		}
		return o
	}
	for _, c := range []struct {
		name     string
		auto     PerformerOptions
		explicit PerformerOptions // without Features, Chunk, Omega, Norms, Kernel
	}{
		{"zero", PerformerOptions{}, PerformerOptions{Center: CenterOn, FeatureMap: ops.FeaturesFavorPP}},
		{"moments", PerformerOptions{Moments: centred}, PerformerOptions{Center: CenterOn, FeatureMap: ops.FeaturesADERF, Moments: centred}},
		{"moments and balance", PerformerOptions{Moments: centred, Balance: true},
			PerformerOptions{Center: CenterOn, FeatureMap: ops.FeaturesFavorPP, Moments: centred, Balance: true}},
		{"uncentred", PerformerOptions{Center: CenterOff, Moments: uncentred}, PerformerOptions{Center: CenterOff, FeatureMap: ops.FeaturesADERF, Moments: uncentred}},
		{"trig", PerformerOptions{Kernel: ops.KernelTrig}, PerformerOptions{Kernel: ops.KernelTrig, Center: CenterOff, FeatureMap: ops.FeaturesFavorPlus}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := spelled(c.explicit)
			if got := c.auto.Resolved(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Resolved() = %+v, want %+v", got, want)
			}
			if c.auto.Centered() != (want.Center == CenterOn) {
				t.Errorf("Centered() = %v", c.auto.Centered())
			}
			am, rep, err := ToPerformer(m, c.auto)
			if err != nil {
				t.Fatal(err)
			}
			em, _, err := ToPerformer(m, want)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := proto.MarshalOptions{Deterministic: true}.Marshal(am)
			b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(em)
			if !bytes.Equal(a, b) {
				t.Error("the automatic options write another model than the spelled-out ones")
			}
			ro := rep.Options
			if ro.Features != 256 || ro.Omega != features.Orthogonal || ro.Norms != features.NormsChi || ro.Kernel != want.Kernel ||
				ro.Center != (want.Center == CenterOn) || ro.FeatureMap != want.FeatureMap || ro.Balance != want.Balance {
				t.Errorf("report options %+v, want the resolved %+v", ro, want)
			}
			for _, n := range am.Graph.Node {
				if n.GetOpType() != ops.PerformerOp {
					continue
				}
				if got := onnx.AttrInt(n, "center", 0) != 0; got != (want.Center == CenterOn) {
					t.Errorf("node %s: center=%v", n.GetName(), got)
				}
				if got := ops.FeatureMap(onnx.AttrString(n, "features", string(ops.FeaturesFavorPlus))); got != want.FeatureMap {
					t.Errorf("node %s: features=%s", n.GetName(), got)
				}
			}
		})
	}
}
