package benchrun

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestVariantDefaults: with no sizes set, each variant is byte for byte
// the model the conversion of its name writes with its zero-value options
// (and the seed), which is what the conversion command writes without
// flags; the cost model prices the sizes the conversions report, and
// the linformer's k is convert.DefaultLinformerK (bench's --k default).
func TestVariantDefaults(t *testing.T) {
	m, err := onnx.Load(filepath.Join("..", "..", "..", "testdata", "bert-tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	const seed = 7
	forms := []convert.Form{convert.Original, convert.Performer, convert.Linformer, convert.LocalPooled, convert.Lara}
	p, err := Variants(m, VariantOptions{Variants: forms, Lengths: []int{64}, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	want := map[convert.Form]func() (*onnxpb.ModelProto, *convert.Report, error){
		convert.Performer: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(m, convert.PerformerOptions{Seed: seed})
		},
		convert.Linformer: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLinformer(m, convert.LinformerOptions{Seed: seed})
		},
		convert.LocalPooled: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLocalPooled(m, convert.LocalPooledOptions{})
		},
		convert.Lara: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLARA(m, convert.LaraOptions{Seed: seed})
		},
	}
	marshal := func(x *onnxpb.ModelProto) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(marshal(p.Models[convert.Original]), marshal(m)) {
		t.Error("the original variant differs from the model (64 tokens fit its table)")
	}
	for f, conv := range want {
		wm, rep, err := conv()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(marshal(p.Models[f]), marshal(wm)) {
			t.Errorf("%s: the variant differs from the conversion with default options", f)
		}
		if got := p.Reports[f].Options; got != rep.Options {
			t.Errorf("%s: report options %+v, want %+v", f, got, rep.Options)
		}
	}
	if got := p.Reports[convert.Linformer].Options.Segments; got != convert.DefaultLinformerK {
		t.Errorf("the linformer's k is %d, bench's default DefaultLinformerK %d", got, convert.DefaultLinformerK)
	}
	if ro := p.Reports[convert.Performer].Options; ro.Features != 256 || !ro.Center || ro.FeatureMap != "favor++" {
		t.Errorf("performer variant %+v, want convert performer's default: 256 centred favor++ features", ro)
	}
	dims, _, err := convert.ModelDims(m)
	if err != nil {
		t.Fatal(err)
	}
	cm := VariantOptions{}.costModel(dims, convert.Weights{}, p)
	lp, la := p.Reports[convert.LocalPooled].Options, p.Reports[convert.Lara].Options
	if cm.Features != 256 || cm.K != convert.DefaultLinformerK || cm.Block != lp.Block || cm.Segments != lp.Segments || cm.Sinks != 2 ||
		cm.Landmarks != la.Landmarks || cm.Samples != la.Samples || cm.Landmarks != convert.DefaultLaraLandmarks {
		t.Errorf("cost model %+v does not price the converted sizes (local-pooled %+v, lara %+v)", cm, lp, la)
	}
	for _, f := range forms[1:] {
		found := false
		for _, n := range p.Notes {
			found = found || strings.HasPrefix(n, string(f)+":") && strings.Contains(n, "as convert "+string(f)+" writes by default")
		}
		if !found {
			t.Errorf("no note says the %s variant has the conversion's defaults: %q", f, p.Notes)
		}
	}
}

// TestVariantSizes: a size set is passed on to its conversion, and the
// note says the sizes were set.
func TestVariantSizes(t *testing.T) {
	m, err := onnx.Load(filepath.Join("..", "..", "..", "testdata", "bert-tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := Variants(m, VariantOptions{Variants: []convert.Form{convert.Performer}, Lengths: []int{64}, Seed: 7, Sizes: convert.Sizes{"features": 16}})
	if err != nil {
		t.Fatal(err)
	}
	if ro := q.Reports[convert.Performer].Options; ro.Features != 16 || len(q.Notes) != 1 || !strings.Contains(q.Notes[0], "with these sizes") {
		t.Errorf("Features 16 gave %d features, notes %q", ro.Features, q.Notes)
	}
}
