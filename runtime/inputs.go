package runtime

import (
	"fmt"
	"sort"
	"strings"

	"github.com/linearize/linearize/onnx"
)

// CheckInputs reports whether feed supplies every declared input with the
// declared element type, rank and fixed dimensions, and nothing else. The
// error names the offending input.
func CheckInputs(declared []Value, feed map[string]*onnx.Tensor) error {
	known := map[string]bool{}
	for _, v := range declared {
		known[v.Name] = true
		t, ok := feed[v.Name]
		if !ok || t == nil {
			return fmt.Errorf("runtime: input %q is missing (%s)", v.Name, describe(v))
		}
		if err := t.Check(); err != nil {
			return fmt.Errorf("runtime: input %q: %v", v.Name, err)
		}
		if v.DType != onnx.Undefined && t.DType != v.DType {
			return fmt.Errorf("runtime: input %q is %s, the model wants %s", v.Name, t, describe(v))
		}
		if v.Shape != nil {
			if len(t.Shape) != len(v.Shape) {
				return fmt.Errorf("runtime: input %q has shape %v, the model wants %s", v.Name, t.Shape, describe(v))
			}
			for i, d := range v.Shape {
				if d.Value >= 0 && int64(t.Shape[i]) != d.Value {
					return fmt.Errorf("runtime: input %q has shape %v, the model wants %s", v.Name, t.Shape, describe(v))
				}
			}
		}
	}
	var extra []string
	for n := range feed {
		if !known[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		names := make([]string, len(declared))
		for i, v := range declared {
			names[i] = v.Name
		}
		return fmt.Errorf("runtime: the model has no input %q (inputs: %s)", extra[0], strings.Join(names, ", "))
	}
	return nil
}

// describe formats a declared value as "int64[batch 128]".
func describe(v Value) string {
	return onnx.TypeName(v.DType) + FormatDims(v.Shape)
}

// FormatDims formats a declared shape as "[batch 128 ?]"; "[?...]" when the
// rank is unknown.
func FormatDims(shape []onnx.Dim) string {
	if shape == nil {
		return "[?...]"
	}
	parts := make([]string, len(shape))
	for i, d := range shape {
		switch {
		case d.Value >= 0:
			parts[i] = fmt.Sprint(d.Value)
		case d.Param != "":
			parts[i] = d.Param
		default:
			parts[i] = "?"
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}
