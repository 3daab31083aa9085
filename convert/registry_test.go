package convert_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestConversionSizesAreDefaults: each size's default is its
// conversion's (a bench variant with the size at its default is byte for
// byte the variant without it), and NewCostModel prices every conversion
// at those defaults.
func TestConversionSizesAreDefaults(t *testing.T) {
	m, err := models.BERT(models.TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	marshal := func(x *onnxpb.ModelProto) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range convert.Conversions() {
		if c.Exact {
			continue // the tiny BERT has no window blocks
		}
		want, wrep, err := c.Bench(m, nil, 3)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for _, z := range c.Sizes {
			got, rep, err := c.Bench(m, convert.Sizes{z.Flag: z.Default}, 3)
			if err != nil {
				t.Fatalf("%s --%s %d: %v", c.Name, z.Flag, z.Default, err)
			}
			if !bytes.Equal(marshal(got), marshal(want)) || rep.Options != wrep.Options {
				t.Errorf("%s: --%s %d (its default) converts otherwise than no size", c.Name, z.Flag, z.Default)
			}
			if !c.Sized(convert.Sizes{z.Flag: 1}) {
				t.Errorf("%s: Sized misses --%s", c.Name, z.Flag)
			}
			if s, ok := c.SizeOf(z.Option); !ok || s.Flag != z.Flag {
				t.Errorf("%s: SizeOf(%q) = %+v, %v", c.Name, z.Option, s, ok)
			}
		}
		if c.Describe(wrep.Options) == "" {
			t.Errorf("%s: no description of its sizes", c.Name)
		}
	}
	dims, _, err := convert.ModelDims(m)
	if err != nil {
		t.Fatal(err)
	}
	cm := convert.NewCostModel(dims, nil, convert.Weights{})
	want := convert.CostModel{Dims: dims, Features: convert.DefaultPerformerFeatures, K: convert.DefaultLinformerK, Block: convert.DefaultBlock,
		Segments: convert.DefaultSegments, Sinks: 2, Landmarks: convert.DefaultLaraLandmarks, Samples: 1, MapFeatures: dims.HeadDim}
	if cm != want {
		t.Errorf("NewCostModel at the defaults: %+v, want %+v", cm, want)
	}
	if got := convert.NewCostModel(dims, convert.Sizes{"block": 8, "map-features": 3}, convert.Weights{}); got.Block != 8 || got.MapFeatures != 3 {
		t.Errorf("NewCostModel with block 8, map-features 3: %+v", got)
	}
	forms := cm.Forms()
	if len(forms) != len(convert.Conversions()) || forms[0] != convert.Original {
		t.Errorf("the defaults price %v: want the original and every conversion but the window form (no window layers)", forms)
	}
}

// TestSinks: the text form of a Sinks set is the --sinks flag's, both
// ways, in JSON too; unset and NoSinks differ.
func TestSinks(t *testing.T) {
	for _, c := range []struct {
		text string
		want convert.Sinks
	}{
		{"", 0}, {"none", convert.NoSinks}, {"first", convert.SinkFirst}, {"last", convert.SinkLast},
		{"first,last", convert.DefaultSinks}, {"last, first", convert.DefaultSinks},
	} {
		got, err := convert.ParseSinks(c.text)
		if err != nil || got != c.want {
			t.Errorf("ParseSinks(%q) = %v, %v; want %v", c.text, got, err, c.want)
		}
		if back, _ := convert.ParseSinks(got.String()); back != got {
			t.Errorf("%v: String %q reads back as %v", got, got.String(), back)
		}
	}
	for _, bad := range []string{"middle", "first,middle", "none,first"} {
		if _, err := convert.ParseSinks(bad); err == nil {
			t.Errorf("ParseSinks(%q): no error", bad)
		}
	}
	if n := convert.DefaultSinks.Count() + convert.SinkLast.Count() + convert.NoSinks.Count(); n != 3 {
		t.Errorf("counts add to %d, want 2 + 1 + 0", n)
	}
	b, err := json.Marshal(convert.ReportOptions{Sinks: convert.DefaultSinks})
	if err != nil || !bytes.Contains(b, []byte(`"sinks":"first,last"`)) {
		t.Errorf("JSON %s, %v", b, err)
	}
	var ro convert.ReportOptions
	if err := json.Unmarshal([]byte(`{"sinks":"none"}`), &ro); err != nil || ro.Sinks != convert.NoSinks {
		t.Errorf("JSON none: %v, %v", ro.Sinks, err)
	}
	if b, _ := json.Marshal(convert.ReportOptions{}); bytes.Contains(b, []byte("sinks")) {
		t.Errorf("unset sinks written: %s", b)
	}
}
