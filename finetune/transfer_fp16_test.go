package finetune

import (
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Transfer trains the maps of a float16 model (published fp16 copies of
// the fixtures, by onnxruntime's and onnxconverter-common's converters):
// the exact teacher runs, the captured values are widened to float32 and
// the trained maps (float32, as the converter adds them) are written back;
// the trained model runs and no layer's error grows. Before the teacher's
// function was typed as the model's, onnxruntime refused it ("B has
// inconsistent type tensor(float)").
func TestTransferFloat16(t *testing.T) {
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("%v (run scripts/setup.sh)", err)
	}
	for _, c := range []struct {
		name, file string
		conv       func(*onnxpb.ModelProto) (*onnxpb.ModelProto, *convert.Report, error)
	}{
		{"hedgehog", "minilm_eager_op17.fp16_ortx.onnx", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToHedgehog(m, convert.HedgehogOptions{Linear: true})
		}},
		{"hedgehog", "bert_eager_op14.fp16_occ.onnx", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToHedgehog(m, convert.HedgehogOptions{Linear: true})
		}},
		// convert long --learned: the float16 position table is tiled
		// with period W as well.
		{"long-learned", "minilm_eager_op17.fp16_ortx.onnx", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLong(m, convert.LongOptions{Learned: true, Window: 8, MaxLength: 1024})
		}},
	} {
		t.Run(c.name+"/"+c.file, func(t *testing.T) {
			m, err := onnx.Load(filepath.Join("..", "testdata", "fixtures", "published", c.file))
			if err != nil {
				t.Fatal(err)
			}
			conv, _, err := c.conv(m)
			if err != nil {
				t.Fatal(err)
			}
			const seq = 16
			feed, err := infer.RandomInputs(conv, infer.GraphInputs(conv), infer.RandomOptions{Batch: 4, SeqLen: seq, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			cal := &Calibration{Feed: feed, Rows: 4, SeqLen: seq, Doc: []int{0, 1, 2, 3}}
			trained, rep, err := Transfer(conv, cal, TransferOptions{Steps: 10, Windows: 2, Seed: 1, HeldOut: []bool{false, false, false, true}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Layers) == 0 {
				t.Fatal("no layer trained")
			}
			for _, l := range rep.Layers {
				t.Logf("layer %d: train %.4f → %.4f, held-out %.4f → %.4f", l.Layer, l.TrainBefore, l.TrainAfter, l.HeldBefore, l.HeldAfter)
				if !(l.TrainAfter <= l.TrainBefore) || !(l.HeldAfter <= l.HeldBefore) {
					t.Errorf("layer %d: train %.4f → %.4f, held-out %.4f → %.4f", l.Layer, l.TrainBefore, l.TrainAfter, l.HeldBefore, l.HeldAfter)
				}
			}
			if !rep.KeptInput && changedInitializers(conv, trained) == 0 {
				t.Error("Transfer returned the trained model, but no parameter changed")
			}
			sess, err := infer.Open(infer.DefaultBackend, trained, infer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			if _, err := sess.Run(feed); err != nil {
				t.Fatalf("trained model: %v", err)
			}
		})
	}
}
