package infer

import (
	"fmt"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/internal/nativeprof"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"

	// The custom ops (domain ai.linearize) register their kernels with
	// package kernels when ops is loaded.
	_ "github.com/linearize/linearize/ops"
)

func init() {
	RegisterBackend("native", func(m *onnxpb.ModelProto, opts Options) (Session, error) {
		return NewNativeSession(m, opts)
	})
}

// NativeOptions configures a native session beyond Options.
type NativeOptions struct {
	Options
	// InlineFunctions expands every call of a model-local function into
	// the function's body, even when a native kernel is registered for the
	// function's (domain, op). By default such a kernel is preferred and
	// only functions without a kernel are expanded.
	InlineFunctions bool
	// Profile records the time spent in each op type (read by
	// `linlab bench-backends --profile`).
	Profile bool
}

// NewNativeSession creates a session that runs m with the Go kernels
// registered in package kernels: its standard and contrib ops and the
// custom ops of package ops (matrix products through internal/gemm, which
// uses an assembly micro-kernel on amd64 with AVX2 or AVX-512).
//
// Nodes run in topological order; every node's kernel is looked up when
// the session is created, so an unsupported op fails here, naming the node,
// rather than in Run. Initializers are decoded once, and the large float
// ones are registered with the GEMM so that they are packed once (Close
// releases them). Intermediate values are dropped after their last use.
// Shapes are whatever the inputs make them. Calls of model-local functions
// (ModelProto.functions) are expanded into their bodies, with attribute
// references resolved, unless a kernel is registered for the function's
// op (see NativeOptions.InlineFunctions). opts.Threads bounds each
// kernel's goroutines (0: GOMAXPROCS); opts.Expose names internal values
// Run may return.
func NewNativeSession(m *onnxpb.ModelProto, opts Options) (Session, error) {
	return NewNativeSessionWith(m, NativeOptions{Options: opts})
}

// nativeNode is one step of the execution plan.
type nativeNode struct {
	node   *onnxpb.NodeProto
	kernel kernels.Kernel
	opset  int64
	in     []int // value slots, -1 for an absent optional input
	out    []int // value slots, -1 for an unused output
	free   []int // slots whose last use is this node
	// captured are the slots of the enclosing-graph values the node's
	// subgraphs (If, Loop) read by name; subgraphs holds those graph
	// attributes, prepared once (nil for a node without any). Such a node
	// runs with a scope that resolves the names.
	captured  []int
	subgraphs map[*onnxpb.GraphProto]*kernels.Subgraph
}

// nativeSession is an interpreter over a flattened, topologically sorted
// node list. Values live in slots; a slot is released after its last
// consumer ran (reference counting resolved when the session is built).
type nativeSession struct {
	threads int
	inputs  []Value
	outputs []Value
	plan    []nativeNode
	slots   map[string]int
	nslots  int
	consts  map[int]*onnx.Tensor      // initializers, decoded once
	inSlot  map[string]int            // graph inputs (overridable initializers too)
	decl    map[string]Value          // declared input types by name
	visible map[string]bool           // graph outputs and exposed values
	lastUse []int                     // per slot: index of the last node using it, -1 if none
	release []func()                  // drop the GEMM's packed copies of the weights
	opsets  func(domain string) int64 // the model's opset per domain (for subgraphs)

	profMu sync.Mutex
	prof   map[string]*nativeprof.OpTime // by op label; nil unless profiling
}

// minPackedConstant is the size from which a float initializer is
// registered with the GEMM as a constant (packed once, reused every run).
const minPackedConstant = 4096

// NewNativeSessionWith is NewNativeSession with native-only options.
func NewNativeSessionWith(m *onnxpb.ModelProto, opts NativeOptions) (Session, error) {
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("infer: native: model has no graph")
	}
	g := m.Graph
	s := &nativeSession{
		threads: opts.Threads,
		slots:   map[string]int{},
		consts:  map[int]*onnx.Tensor{},
		inSlot:  map[string]int{},
		decl:    map[string]Value{},
		visible: map[string]bool{},
	}
	if s.threads <= 0 {
		s.threads = runtime.GOMAXPROCS(0)
	}
	if opts.Profile {
		s.prof = map[string]*nativeprof.OpTime{}
	}
	if err := s.loadInitializers(g); err != nil {
		return nil, err
	}
	s.readSignature(g, opts.Expose)
	nodes, err := onnx.TopoSort(g)
	if err != nil {
		return nil, fmt.Errorf("infer: native: %v", err)
	}
	s.opsets = func(domain string) int64 { return onnx.OpsetVersion(m, domain) }
	fx := newFuncExpander(m, opts.InlineFunctions)
	flat, err := fx.expand(nodes, nil, 0)
	if err != nil {
		return nil, err
	}
	for _, fn := range flat {
		if err := s.planNode(fn); err != nil {
			return nil, err
		}
	}
	if err := s.checkReturnable(); err != nil {
		return nil, err
	}
	s.planReleases()
	return s, nil
}

// slot returns the value slot of name, assigning the next one the first
// time.
func (s *nativeSession) slot(name string) int {
	if i, ok := s.slots[name]; ok {
		return i
	}
	s.slots[name] = s.nslots
	s.nslots++
	return s.nslots - 1
}

// loadInitializers decodes g's initializers once, and registers the large
// float ones with the GEMM so that they are packed once; a session
// dropped without Close still releases them.
func (s *nativeSession) loadInitializers(g *onnxpb.GraphProto) error {
	for _, t := range g.Initializer {
		v, err := onnx.DecodeTensor(t)
		if err != nil {
			return fmt.Errorf("infer: native: initializer %q: %v", t.GetName(), err)
		}
		s.consts[s.slot(t.GetName())] = v
		if d, ok := v.Data.([]float32); ok && len(d) >= minPackedConstant {
			s.release = append(s.release, gemm.RegisterConstant(d))
		}
	}
	if len(s.release) > 0 {
		runtime.AddCleanup(s, func(rel []func()) {
			for _, r := range rel {
				r()
			}
		}, s.release)
	}
	return nil
}

// readSignature records g's inputs (an initializer declared as an input
// can be overridden, but is not one the caller must give), its outputs,
// and the values Run may return (the outputs and expose).
func (s *nativeSession) readSignature(g *onnxpb.GraphProto, expose []string) {
	for _, vi := range g.Input {
		dt, shape, _ := onnx.TensorType(vi)
		v := Value{Name: vi.GetName(), DType: dt, Shape: shape}
		s.inSlot[vi.GetName()] = s.slot(vi.GetName())
		s.decl[vi.GetName()] = v
		if _, isInit := s.consts[s.slots[vi.GetName()]]; !isInit {
			s.inputs = append(s.inputs, v)
		}
	}
	for _, vi := range g.Output {
		dt, shape, _ := onnx.TensorType(vi)
		s.outputs = append(s.outputs, Value{Name: vi.GetName(), DType: dt, Shape: shape})
		s.visible[vi.GetName()] = true
	}
	for _, e := range expose {
		s.visible[e] = true
	}
}

// planNode appends fn to the plan: its kernel, looked up now so that an
// unsupported op fails here, its input and output slots, its subgraphs.
func (s *nativeSession) planNode(fn flatNode) error {
	n := fn.node
	k, err := kernels.Lookup(n.GetDomain(), n.GetOpType(), fn.opset)
	if err != nil {
		return fmt.Errorf("infer: node %s: %v", nodeLabel(n), err)
	}
	pn := nativeNode{node: n, kernel: k, opset: fn.opset}
	for _, in := range n.Input {
		if in == "" {
			pn.in = append(pn.in, -1)
			continue
		}
		i, ok := s.slots[in]
		if !ok {
			return fmt.Errorf("infer: node %s: input %q is neither a graph input, an initializer nor produced by a node", nodeLabel(n), in)
		}
		pn.in = append(pn.in, i)
	}
	if err := s.planSubgraphs(&pn); err != nil {
		return err
	}
	for _, o := range n.Output {
		if o == "" {
			pn.out = append(pn.out, -1)
			continue
		}
		pn.out = append(pn.out, s.slot(o))
	}
	s.plan = append(s.plan, pn)
	return nil
}

// checkReturnable checks that every graph output is produced and every
// exposed value exists.
func (s *nativeSession) checkReturnable() error {
	for _, o := range s.outputs {
		if _, ok := s.slots[o.Name]; !ok {
			return fmt.Errorf("infer: native: graph output %q is not produced by any node", o.Name)
		}
	}
	for e := range s.visible {
		if _, ok := s.slots[e]; !ok {
			return fmt.Errorf("infer: native: exposed value %q does not exist in the graph", e)
		}
	}
	return nil
}

// planReleases counts references: a slot is released after its last
// consumer ran.
func (s *nativeSession) planReleases() {
	s.lastUse = make([]int, s.nslots)
	for i := range s.lastUse {
		s.lastUse[i] = -1
	}
	for ni, pn := range s.plan {
		for _, i := range pn.in {
			if i >= 0 {
				s.lastUse[i] = ni
			}
		}
		for _, i := range pn.captured {
			s.lastUse[i] = ni
		}
	}
	for i, last := range s.lastUse {
		if last >= 0 {
			s.plan[last].free = append(s.plan[last].free, i)
		}
	}
}

// planSubgraphs prepares a node with graph attributes (If, Loop) once:
// every op of its subgraphs must have a kernel (checked now, like the main
// graph's), initializers are decoded, and the outer values the subgraphs
// read are recorded so that they stay alive until the node ran.
func (s *nativeSession) planSubgraphs(pn *nativeNode) error {
	n := pn.node
	sgs, err := kernels.CompileAttributes(n, s.opsets)
	if err != nil {
		return fmt.Errorf("infer: node %s: %v", nodeLabel(n), err)
	}
	if sgs == nil {
		return nil
	}
	pn.subgraphs = sgs
	explicit := map[string]bool{}
	for _, in := range n.Input {
		explicit[in] = true
	}
	for _, name := range onnx.NodeInputs(n) {
		if explicit[name] {
			continue
		}
		i, ok := s.slots[name]
		if !ok {
			return fmt.Errorf("infer: node %s: a subgraph reads %q, which is neither a graph input, an initializer nor produced by an earlier node", nodeLabel(n), name)
		}
		pn.captured = append(pn.captured, i)
	}
	return nil
}

func nodeLabel(n *onnxpb.NodeProto) string {
	name := n.GetName()
	if name == "" && len(n.Output) > 0 {
		name = n.Output[0]
	}
	op := n.GetOpType()
	if d := n.GetDomain(); d != "" && d != "ai.onnx" {
		op = d + ":" + op
	}
	return fmt.Sprintf("%q (%s)", name, op)
}

func (s *nativeSession) Inputs() []Value  { return append([]Value(nil), s.inputs...) }
func (s *nativeSession) Outputs() []Value { return append([]Value(nil), s.outputs...) }

// Close releases the packed weights. Run must not be called afterwards.
func (s *nativeSession) Close() error {
	for _, r := range s.release {
		r()
	}
	return nil
}

// Run evaluates the model. It does not modify the session, so concurrent
// calls are safe.
func (s *nativeSession) Run(inputs map[string]*onnx.Tensor, names ...string) (map[string]*onnx.Tensor, error) {
	if len(names) == 0 {
		for _, o := range s.outputs {
			names = append(names, o.Name)
		}
	}
	keep := map[int]bool{}
	for _, name := range names {
		if !s.visible[name] {
			return nil, fmt.Errorf("infer: native: %q is not a graph output or exposed value", name)
		}
		keep[s.slots[name]] = true
	}
	vals, err := s.startValues(inputs)
	if err != nil {
		return nil, err
	}
	if err := s.execute(vals, keep); err != nil {
		return nil, err
	}
	res := make(map[string]*onnx.Tensor, len(names))
	for _, name := range names {
		v := vals[s.slots[name]]
		if v == nil {
			return nil, fmt.Errorf("infer: native: %q was not computed", name)
		}
		res[name] = v
	}
	return res, nil
}

// startValues returns the slots' values before the first node runs: the
// initializers and the inputs, each checked against its declaration.
func (s *nativeSession) startValues(inputs map[string]*onnx.Tensor) ([]*onnx.Tensor, error) {
	vals := make([]*onnx.Tensor, s.nslots)
	for i, c := range s.consts {
		vals[i] = c
	}
	for name, t := range inputs {
		i, ok := s.inSlot[name]
		if !ok {
			return nil, fmt.Errorf("infer: native: model has no input %q", name)
		}
		if err := checkInput(s.decl[name], t); err != nil {
			return nil, err
		}
		vals[i] = t
	}
	for _, in := range s.inputs {
		if vals[s.inSlot[in.Name]] == nil {
			return nil, fmt.Errorf("infer: native: input %q is missing", in.Name)
		}
	}
	return vals, nil
}

// execute runs the plan over vals, dropping each value after its last use
// unless keep holds its slot, within the budget of the bytes alive at
// once.
func (s *nativeSession) execute(vals []*onnx.Tensor, keep map[int]bool) error {
	ctx := &kernels.Context{Threads: s.threads}
	// scope resolves the names subgraphs read from the main graph.
	scope := func(name string) (*onnx.Tensor, bool) {
		i, ok := s.slots[name]
		if !ok || vals[i] == nil {
			return nil, false
		}
		return vals[i], true
	}
	args := make([]*onnx.Tensor, 0, 8)
	var live liveBytes
	live.init(s.nslots)
	for _, pn := range s.plan {
		var err error
		if args, err = nodeArgs(pn, vals, args[:0]); err != nil {
			return err
		}
		ctx.Node, ctx.Opset = pn.node, pn.opset
		ctx.Scope, ctx.Opsets, ctx.Subgraphs = nil, nil, nil
		if pn.subgraphs != nil {
			ctx.Scope, ctx.Opsets, ctx.Subgraphs = scope, s.opsets, pn.subgraphs
		}
		out, err := s.call(pn, ctx, args)
		if err != nil {
			return fmt.Errorf("infer: node %s: %w", nodeLabel(pn.node), err)
		}
		if err := storeOutputs(pn, out, vals, args, &live); err != nil {
			return err
		}
		if err := live.check(); err != nil {
			return fmt.Errorf("infer: node %s: %w", nodeLabel(pn.node), err)
		}
		for _, i := range pn.free {
			if _, c := s.consts[i]; !c && !keep[i] {
				live.drop(i)
				vals[i] = nil
			}
		}
	}
	return nil
}

// nodeArgs appends pn's input values to args (nil for an absent optional
// input).
func nodeArgs(pn nativeNode, vals, args []*onnx.Tensor) ([]*onnx.Tensor, error) {
	for _, i := range pn.in {
		if i < 0 {
			args = append(args, nil)
			continue
		}
		if vals[i] == nil {
			return nil, fmt.Errorf("infer: node %s: input %q has no value", nodeLabel(pn.node), pn.node.Input[len(args)])
		}
		args = append(args, vals[i])
	}
	return args, nil
}

// call runs pn's kernel, timing it when the session profiles.
func (s *nativeSession) call(pn nativeNode, ctx *kernels.Context, args []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if s.prof == nil {
		return callKernel(pn.kernel, ctx, args)
	}
	t0 := time.Now()
	out, err := callKernel(pn.kernel, ctx, args)
	s.record(pn.node, time.Since(t0))
	return out, err
}

// storeOutputs puts the outputs pn's kernel returned into their slots and
// counts their bytes.
func storeOutputs(pn nativeNode, out, vals, args []*onnx.Tensor, live *liveBytes) error {
	for j, i := range pn.out {
		if i < 0 {
			continue
		}
		if j >= len(out) || out[j] == nil {
			return fmt.Errorf("infer: node %s: kernel produced no value for output %q", nodeLabel(pn.node), pn.node.Output[j])
		}
		vals[i] = out[j]
		live.add(i, out[j], args)
	}
	return nil
}

// OpTimes returns the per-op-type times of a session created with
// NativeOptions.Profile, slowest first; ok is false for a session created
// without. Read it with internal/nativeprof.Read: the result's type is
// internal, so this method is no part of the public API.
func (s *nativeSession) OpTimes() (times []nativeprof.OpTime, ok bool) {
	if s.prof == nil {
		return nil, false
	}
	s.profMu.Lock()
	defer s.profMu.Unlock()
	for _, t := range s.prof {
		times = append(times, *t)
	}
	sort.Slice(times, func(i, j int) bool {
		if times[i].Total != times[j].Total {
			return times[i].Total > times[j].Total
		}
		return times[i].Op < times[j].Op
	})
	return times, true
}

func (s *nativeSession) record(n *onnxpb.NodeProto, d time.Duration) {
	op := n.GetOpType()
	if dom := n.GetDomain(); dom != "" && dom != "ai.onnx" {
		op = dom + ":" + op
	}
	s.profMu.Lock()
	t := s.prof[op]
	if t == nil {
		t = &nativeprof.OpTime{Op: op}
		s.prof[op] = t
	}
	t.Calls++
	t.Total += d
	s.profMu.Unlock()
}

// callKernel runs k, turning a panic (a kernel bug) into an error so that
// one bad node cannot bring down the caller.
func callKernel(k kernels.Kernel, ctx *kernels.Context, args []*onnx.Tensor) (out []*onnx.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("kernel panicked: %v", r)
		}
	}()
	return k(ctx, args)
}

// checkInput compares a fed tensor with the input's declaration.
func checkInput(d Value, t *onnx.Tensor) error {
	if t == nil {
		return fmt.Errorf("infer: native: input %q is nil", d.Name)
	}
	if d.DType != onnx.Undefined && t.DType != d.DType {
		return fmt.Errorf("infer: native: input %q has type %s, the model declares %s", d.Name, onnx.TypeName(t.DType), onnx.TypeName(d.DType))
	}
	if err := t.Check(); err != nil {
		return fmt.Errorf("infer: native: input %q: %v", d.Name, err)
	}
	if d.Shape == nil {
		return nil
	}
	if len(t.Shape) != len(d.Shape) {
		return fmt.Errorf("infer: native: input %q has shape %v, the model declares rank %d", d.Name, t.Shape, len(d.Shape))
	}
	for i, dim := range d.Shape {
		if dim.Value >= 0 && int64(t.Shape[i]) != dim.Value {
			return fmt.Errorf("infer: native: input %q has shape %v, the model declares dimension %d = %d", d.Name, t.Shape, i, dim.Value)
		}
	}
	return nil
}

// flatNode is a node of the flattened graph with the opset its domain has
// where it was written (the model, or the function that contains it).
type flatNode struct {
	node  *onnxpb.NodeProto
	opset int64
}

// funcExpander inlines calls of model-local functions.
type funcExpander struct {
	model  *onnxpb.ModelProto
	funcs  map[string]*onnxpb.FunctionProto // "domain:name:overload"
	inline bool
	count  int
}

const maxFunctionDepth = 64

func newFuncExpander(m *onnxpb.ModelProto, inline bool) *funcExpander {
	fx := &funcExpander{model: m, funcs: map[string]*onnxpb.FunctionProto{}, inline: inline}
	for _, f := range m.Functions {
		fx.funcs[funcKey(f.GetDomain(), f.GetName(), f.GetOverload())] = f
	}
	return fx
}

func funcKey(domain, name, overload string) string {
	if domain == "ai.onnx" {
		domain = ""
	}
	return domain + ":" + name + ":" + overload
}

// opsetOf returns the version of domain imported by the function f (nil:
// the model), falling back to the model's import.
func (fx *funcExpander) opsetOf(f *onnxpb.FunctionProto, domain string) int64 {
	if f != nil {
		if v, ok := onnx.ImportedOpset(f.OpsetImport, domain); ok {
			return v
		}
	}
	return onnx.OpsetVersion(fx.model, domain)
}

// expand flattens nodes (written inside function f, nil for the main
// graph), replacing calls of model-local functions by their bodies.
func (fx *funcExpander) expand(nodes []*onnxpb.NodeProto, f *onnxpb.FunctionProto, depth int) ([]flatNode, error) {
	var out []flatNode
	for _, n := range nodes {
		opset := fx.opsetOf(f, n.GetDomain())
		callee := fx.funcs[funcKey(n.GetDomain(), n.GetOpType(), n.GetOverload())]
		if callee == nil {
			out = append(out, flatNode{n, opset})
			continue
		}
		if !fx.inline {
			if _, err := kernels.Lookup(n.GetDomain(), n.GetOpType(), opset); err == nil {
				out = append(out, flatNode{n, opset})
				continue
			}
		}
		if depth >= maxFunctionDepth {
			return nil, fmt.Errorf("infer: node %s: model-local functions nest deeper than %d (recursive?)", nodeLabel(n), maxFunctionDepth)
		}
		body, err := fx.instantiate(n, callee)
		if err != nil {
			return nil, err
		}
		sub, err := fx.expand(body, callee, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, sub...)
	}
	return out, nil
}

// instantiate returns copies of callee's body nodes for the call n
// (onnx.Instantiate), internal names made unique per call.
func (fx *funcExpander) instantiate(n *onnxpb.NodeProto, callee *onnxpb.FunctionProto) ([]*onnxpb.NodeProto, error) {
	fx.count++
	prefix := n.GetName()
	if prefix == "" {
		prefix = callee.GetName()
	}
	prefix += "/" + strconv.Itoa(fx.count) + "/"
	body, err := onnx.Instantiate(n, callee, prefix)
	if err != nil {
		return nil, fmt.Errorf("infer: node %s: %s", nodeLabel(n), strings.TrimPrefix(err.Error(), "onnx: "))
	}
	return body, nil
}

// liveBytes keeps the bytes of the values a run holds: each tensor is
// under the tensor budget (kernels.MaxTensorBytes), and together they may
// take at most twice it (by default half of the memory the process may
// use), so that the next allocation still fits and no chain of
// individually small tensors ends in Go's fatal out-of-memory. Outputs
// that share their data with an input (Identity, Reshape) are not counted
// again. A value counts as the tensor budget counts it (kernels.TensorBytes).
type liveBytes struct {
	n     []int64 // per slot: bytes counted for its value
	total int64
}

func (l *liveBytes) init(slots int) { l.n = make([]int64, slots) }

func (l *liveBytes) add(slot int, t *onnx.Tensor, args []*onnx.Tensor) {
	l.drop(slot)
	p := dataAddr(t)
	for _, a := range args {
		if a != nil && p != 0 && dataAddr(a) == p {
			return
		}
	}
	b := max(kernels.TensorBytes(t.DType, t.Shape), 0)
	l.n[slot] = b
	l.total += b
}

func (l *liveBytes) drop(slot int) {
	l.total -= l.n[slot]
	l.n[slot] = 0
}

func (l *liveBytes) check() error {
	limit := 2 * kernels.MaxTensorBytes()
	if l.total <= limit {
		return nil
	}
	return fmt.Errorf("%w: the values alive at once take %d bytes, more than twice the tensor budget (%d bytes, set by $%s)",
		kernels.ErrTensorBudget, l.total, limit, kernels.MaxTensorBytesEnv)
}

// dataAddr is the address of t's first element (0 for an empty tensor).
func dataAddr(t *onnx.Tensor) uintptr {
	v := reflect.ValueOf(t.Data)
	if v.Kind() != reflect.Slice || v.Len() == 0 {
		return 0
	}
	return v.Pointer()
}
