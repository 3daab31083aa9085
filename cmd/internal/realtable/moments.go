package realtable

import (
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// performerTag describes the variant options of o ("" for plain FAVOR+):
// "center+balance+favor+", "center+aderf", "favor++", ...
func performerTag(o convert.PerformerOptions) string {
	o = o.Resolved()
	feat := o.FeatureMap
	if !o.Centered() && !o.Balance && feat == ops.FeaturesFavorPlus {
		return ""
	}
	tag := string(feat)
	if o.Balance {
		tag = "balance+" + tag
	}
	if o.Centered() {
		tag = "center+" + tag
	}
	return tag
}

// momentCache holds calibration moments by centring, for Table.
type momentCache map[bool]map[int]*features.Moments

// withMoments returns v with the calibration moments its Performer options
// need, computed from the calibration feed once per centring setting.
func (c momentCache) withMoments(original *onnxpb.ModelProto, v Variant, feed map[string]*onnx.Tensor, opt finetune.Options) (Variant, error) {
	if v.Performer == nil || v.Performer.Moments != nil || !v.Performer.NeedsMoments() {
		return v, nil
	}
	o := *v.Performer
	if c[o.Centered()] == nil {
		mo, err := finetune.PerformerMoments(original, feed, finetune.MomentOptions{NoCenter: !o.Centered(), Backend: opt.Backend, Threads: opt.Threads})
		if err != nil {
			return v, err
		}
		c[o.Centered()] = mo
	}
	o.Moments = c[o.Centered()]
	v.Performer = &o
	return v, nil
}
