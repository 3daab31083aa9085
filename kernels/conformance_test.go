package kernels_test

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"testing"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The ONNX backend node tests shipped by Debian's libonnx-testdata (onnx
// 1.12): one directory per test with model.onnx and test_data_set_0.
const conformanceRoot = "/usr/share/libonnx-testdata/data/node"

// Tolerances: rtol 1e-5 and atol 1e-6 for float32/float64 outputs, 1e-3 for
// float16/bfloat16, exact for integers and bools. opTolerance may loosen
// them per op, with a reason; no claimed op needs it at present (the
// kernels compute transcendental functions and reductions in float64 and
// round once).
var opTolerance = map[string][2]float64{}

func readList(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, _ := strings.Cut(line, "\t")
		if _, dup := out[name]; dup {
			t.Errorf("%s: %s listed twice", path, name)
		}
		out[name] = strings.TrimSpace(reason)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}

// claims reports whether the native kernels cover every node of m, and
// the first op they do not.
func claims(m *onnxpb.ModelProto) (bool, string) {
	for _, n := range m.GetGraph().GetNode() {
		if _, err := kernels.Lookup(n.GetDomain(), n.GetOpType(), onnx.OpsetVersion(m, n.GetDomain())); err != nil {
			return false, n.GetOpType()
		}
	}
	return true, ""
}

// runNodeTest evaluates the graph node by node on test_data_set_0 and
// compares with the expected outputs.
func runNodeTest(dir string, m *onnxpb.ModelProto) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	g := m.GetGraph()
	vals := map[string]*onnx.Tensor{}
	for _, tp := range g.Initializer {
		v, err := onnx.DecodeTensor(tp)
		if err != nil {
			return err
		}
		vals[tp.GetName()] = v
	}
	data := filepath.Join(dir, "test_data_set_0")
	i := 0
	for _, vi := range g.Input {
		if _, ok := vals[vi.GetName()]; ok {
			continue
		}
		p := filepath.Join(data, fmt.Sprintf("input_%d.pb", i))
		i++
		if _, err := os.Stat(p); err != nil {
			continue // an omitted optional input
		}
		_, v, err := onnx.ReadTensorProtoFile(p)
		if err != nil {
			return err
		}
		vals[vi.GetName()] = asDeclared(vi, v)
	}
	for _, n := range g.Node {
		k, err := kernels.Lookup(n.GetDomain(), n.GetOpType(), onnx.OpsetVersion(m, n.GetDomain()))
		if err != nil {
			return err
		}
		in := make([]*onnx.Tensor, len(n.Input))
		for j, name := range n.Input {
			if name == "" {
				continue
			}
			v, ok := vals[name]
			if !ok {
				return fmt.Errorf("node %s: input %q has no value", n.GetOpType(), name)
			}
			in[j] = v
		}
		// Trailing absent inputs are dropped, as a runtime would.
		for len(in) > 0 && in[len(in)-1] == nil {
			in = in[:len(in)-1]
		}
		ctx := &kernels.Context{Node: n, Opset: onnx.OpsetVersion(m, n.GetDomain()), Threads: 1,
			// Subgraphs (If, Loop) read the values of this graph by name.
			Scope:  func(name string) (*onnx.Tensor, bool) { v, ok := vals[name]; return v, ok },
			Opsets: func(domain string) int64 { return onnx.OpsetVersion(m, domain) }}
		before := make([]string, len(in))
		for j, t := range in {
			if t != nil {
				before[j] = snapshot(t)
			}
		}
		out, err := k(ctx, in)
		if err != nil {
			return err
		}
		for j, t := range in {
			if t != nil && snapshot(t) != before[j] {
				return fmt.Errorf("node %s modified its input %d", n.GetOpType(), j)
			}
		}
		for j, name := range n.Output {
			if name == "" {
				continue
			}
			if j >= len(out) || out[j] == nil {
				return fmt.Errorf("node %s: output %d (%s) not produced", n.GetOpType(), j, name)
			}
			if err := out[j].Check(); err != nil {
				return fmt.Errorf("node %s: output %d: %v", n.GetOpType(), j, err)
			}
			vals[name] = out[j]
		}
	}
	rtol, atol := 1e-5, 1e-6
	for _, n := range g.Node {
		if tol, ok := opTolerance[n.GetOpType()]; ok {
			rtol, atol = max(rtol, tol[0]), max(atol, tol[1])
		}
	}
	for j, vi := range g.Output {
		_, want, err := onnx.ReadTensorProtoFile(filepath.Join(data, fmt.Sprintf("output_%d.pb", j)))
		if err != nil {
			return err
		}
		want = asDeclared(vi, want)
		got, ok := vals[vi.GetName()]
		if !ok {
			return fmt.Errorf("output %q not computed", vi.GetName())
		}
		if err := compareTensors(got, want, rtol, atol); err != nil {
			return fmt.Errorf("output %d (%s): %v", j, vi.GetName(), err)
		}
	}
	return nil
}

// snapshot captures a tensor's shape and exact bits (NaNs included).
func snapshot(t *onnx.Tensor) string {
	if d, ok := t.Data.([]string); ok {
		return fmt.Sprint(t.Shape, d)
	}
	return fmt.Sprint(t.Shape) + string(onnx.EncodeRaw(t))
}

// asDeclared relabels test data stored as uint16 for a value the graph
// declares bfloat16 (onnx 1.12 wrote bfloat16 test data that way).
func asDeclared(vi *onnxpb.ValueInfoProto, t *onnx.Tensor) *onnx.Tensor {
	if dt, _, ok := onnx.TensorType(vi); ok && dt == onnx.BFloat16 && t.DType == onnx.Uint16 {
		return &onnx.Tensor{DType: onnx.BFloat16, Shape: t.Shape, Data: t.Data}
	}
	return t
}

// Kept apart from infer/ort_test.go's comparison: test helpers do not
// cross packages.
func compareTensors(got, want *onnx.Tensor, rtol, atol float64) error {
	if got.DType != want.DType {
		return fmt.Errorf("type %s, want %s", onnx.TypeName(got.DType), onnx.TypeName(want.DType))
	}
	if fmt.Sprint(got.Shape) != fmt.Sprint(want.Shape) {
		return fmt.Errorf("shape %v, want %v", got.Shape, want.Shape)
	}
	if got.DType == onnx.String {
		g, w := got.Data.([]string), want.Data.([]string)
		for i := range w {
			if g[i] != w[i] {
				return fmt.Errorf("element %d: %q, want %q", i, g[i], w[i])
			}
		}
		return nil
	}
	g, err := got.AsFloat64s()
	if err != nil {
		return err
	}
	w, err := want.AsFloat64s()
	if err != nil {
		return err
	}
	if got.DType == onnx.Float16 || got.DType == onnx.BFloat16 {
		rtol, atol = max(rtol, 1e-3), max(atol, 1e-3)
	}
	if !onnx.IsFloat(got.DType) {
		rtol, atol = 0, 0
		gi, err := got.AsInt64s()
		if err != nil {
			return err
		}
		wi, err := want.AsInt64s()
		if err != nil {
			return err
		}
		if len(gi) != len(wi) {
			return fmt.Errorf("%d elements, want %d", len(gi), len(wi))
		}
		for i := range wi {
			if gi[i] != wi[i] {
				return fmt.Errorf("element %d: %d, want %d", i, gi[i], wi[i])
			}
		}
		return nil
	}
	for i := range w {
		a, b := g[i], w[i]
		if math.IsNaN(b) {
			if !math.IsNaN(a) {
				return fmt.Errorf("element %d: %g, want NaN", i, a)
			}
			continue
		}
		if math.IsInf(b, 0) {
			if a != b {
				return fmt.Errorf("element %d: %g, want %g", i, a, b)
			}
			continue
		}
		if math.Abs(a-b) > atol+rtol*math.Abs(b) || math.IsNaN(a) {
			return fmt.Errorf("element %d: %g, want %g (rtol %g atol %g)", i, a, b, rtol, atol)
		}
	}
	return nil
}

// TestConformance runs every ONNX node test whose ops the native kernels
// claim. testdata/conformance_expected.txt lists the tests that must pass;
// testdata/conformance_skip.txt lists claimed tests known not to, each with
// a reason. The test fails when an expected test fails or is no longer
// found or claimed, when a claimed test is in neither list, and when a list
// names a test that does not exist.
func TestConformance(t *testing.T) {
	if _, err := os.Stat(conformanceRoot); err != nil {
		t.Skipf("ONNX conformance data not found at %s (Debian package libonnx-testdata; run scripts/setup.sh)", conformanceRoot)
	}
	expected := readList(t, filepath.Join("testdata", "conformance_expected.txt"))
	skip := readList(t, filepath.Join("testdata", "conformance_skip.txt"))
	for name, reason := range skip {
		if reason == "" {
			t.Errorf("conformance_skip.txt: %s has no reason", name)
		}
		if _, ok := expected[name]; ok {
			t.Errorf("%s is both expected and skipped", name)
		}
	}
	entries, err := os.ReadDir(conformanceRoot)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var passed, claimed, skipped int
	var newPasses []string
	for _, e := range entries {
		name := e.Name()
		dir := filepath.Join(conformanceRoot, name)
		m, err := onnx.Load(filepath.Join(dir, "model.onnx"))
		if err != nil {
			continue // not a model we can read; it then cannot be claimed
		}
		seen[name] = true
		ok, op := claims(m)
		if !ok {
			if _, exp := expected[name]; exp {
				t.Errorf("%s: expected to pass but op %s is no longer claimed", name, op)
			}
			if _, sk := skip[name]; sk {
				t.Errorf("%s: in the skip list but op %s is not claimed; remove it", name, op)
			}
			continue
		}
		claimed++
		if _, sk := skip[name]; sk {
			skipped++
			continue
		}
		err = runNodeTest(dir, m)
		_, exp := expected[name]
		switch {
		case err == nil:
			passed++
			if !exp {
				newPasses = append(newPasses, name)
			}
		case exp:
			t.Errorf("%s: %v", name, err)
		default:
			t.Errorf("%s: claimed, fails, and is in neither list: %v", name, err)
		}
	}
	for _, list := range []map[string]string{expected, skip} {
		for name := range list {
			if !seen[name] {
				t.Errorf("%s is listed but no such test exists under %s", name, conformanceRoot)
			}
		}
	}
	if len(newPasses) > 0 {
		sort.Strings(newPasses)
		t.Errorf("claimed tests pass but are not in testdata/conformance_expected.txt (add them):\n%s", strings.Join(newPasses, "\n"))
	}
	t.Logf("conformance: %d passed / %d claimed / %d skipped (of %d node tests)", passed, claimed, skipped, len(seen))
}
