package convert

import "github.com/linearize/linearize/ops"

// NeedsMoments reports whether ToPerformer with these options needs
// calibration Moments: a fitted Balance or FAVOR# ("sderf", "aderf")
// features.
func (o PerformerOptions) NeedsMoments() bool {
	return o.Balance || o.FeatureMap == ops.FeaturesSDERF || o.FeatureMap == ops.FeaturesADERF
}
