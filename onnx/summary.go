package onnx

import (
	"strconv"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// Summary describes a model at a glance: what convert inspect prints.
type Summary struct {
	IRVersion       int64          `json:"ir_version"`
	Producer        string         `json:"producer"`
	ProducerVersion string         `json:"producer_version"`
	Domain          string         `json:"domain,omitempty"`
	Opsets          []OpsetSummary `json:"opsets"`
	Inputs          []ValueSummary `json:"inputs"`
	Outputs         []ValueSummary `json:"outputs"`
	// Ops counts nodes by domain ("ai.onnx" for the default domain) and
	// op type, including nodes in subgraphs and model-local functions.
	Ops              map[string]map[string]int `json:"ops"`
	NodeCount        int                       `json:"node_count"`
	Initializers     int                       `json:"initializer_count"`
	InitializerBytes int64                     `json:"initializer_bytes"`
	Functions        int                       `json:"function_count,omitempty"`
}

// OpsetSummary is one opset import.
type OpsetSummary struct {
	Domain  string `json:"domain"`
	Version int64  `json:"version"`
}

// ValueSummary is a graph input or output. Shape holds one entry per
// dimension: a number for a fixed size, the parameter name for a symbolic
// one, "?" for an unknown one; it is null when the rank is unknown.
type ValueSummary struct {
	Name  string   `json:"name"`
	DType string   `json:"dtype"`
	Shape []string `json:"shape"`
}

// Summarize describes m. Graph inputs that are initializers are left out of
// Inputs. Initializer bytes count the tensor data wherever it is stored
// (raw_data, typed fields or external data).
func Summarize(m *onnxpb.ModelProto) Summary {
	s := Summary{
		IRVersion:       m.GetIrVersion(),
		Producer:        m.GetProducerName(),
		ProducerVersion: m.GetProducerVersion(),
		Domain:          m.GetDomain(),
		Opsets:          []OpsetSummary{},
		Inputs:          []ValueSummary{},
		Outputs:         []ValueSummary{},
		Ops:             map[string]map[string]int{},
		Functions:       len(m.Functions),
	}
	for _, op := range m.OpsetImport {
		d := op.GetDomain()
		if d == "" {
			d = "ai.onnx"
		}
		s.Opsets = append(s.Opsets, OpsetSummary{d, op.GetVersion()})
	}
	g := m.GetGraph()
	inits := map[string]bool{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = true
		s.Initializers++
		s.InitializerBytes += tensorBytes(t)
	}
	for _, vi := range g.GetInput() {
		if !inits[vi.GetName()] {
			s.Inputs = append(s.Inputs, summarizeValue(vi))
		}
	}
	for _, vi := range g.GetOutput() {
		s.Outputs = append(s.Outputs, summarizeValue(vi))
	}
	for key, n := range opHistogram(m) {
		domain, op := "ai.onnx", key
		for i := len(key) - 1; i >= 0; i-- {
			if key[i] == ':' {
				domain, op = key[:i], key[i+1:]
				break
			}
		}
		if s.Ops[domain] == nil {
			s.Ops[domain] = map[string]int{}
		}
		s.Ops[domain][op] += n
		s.NodeCount += n
	}
	return s
}

// opHistogram counts nodes by "domain:op" ("op" alone for the default
// domain), including nodes inside subgraphs and model-local functions.
func opHistogram(m *onnxpb.ModelProto) map[string]int {
	h := map[string]int{}
	var walk func(nodes []*onnxpb.NodeProto)
	walk = func(nodes []*onnxpb.NodeProto) {
		for _, n := range nodes {
			key := n.GetOpType()
			if d := n.GetDomain(); d != "" && d != "ai.onnx" {
				key = d + ":" + key
			}
			h[key]++
			for _, a := range n.Attribute {
				if a.G != nil {
					walk(a.G.Node)
				}
				for _, g := range a.Graphs {
					walk(g.Node)
				}
			}
		}
	}
	walk(m.GetGraph().GetNode())
	for _, f := range m.Functions {
		walk(f.Node)
	}
	return h
}

func summarizeValue(vi *onnxpb.ValueInfoProto) ValueSummary {
	v := ValueSummary{Name: vi.GetName(), DType: "?"}
	dt, shape, ok := TensorType(vi)
	if !ok {
		return v
	}
	v.DType = TypeName(dt)
	if shape != nil {
		v.Shape = make([]string, len(shape))
		for i, d := range shape {
			switch {
			case d.Value >= 0:
				v.Shape[i] = strconv.FormatInt(d.Value, 10)
			case d.Param != "":
				v.Shape[i] = d.Param
			default:
				v.Shape[i] = "?"
			}
		}
	}
	return v
}

// tensorBytes returns the size of a tensor's data as stored.
func tensorBytes(t *onnxpb.TensorProto) int64 {
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		for _, kv := range t.ExternalData {
			if kv.GetKey() == "length" {
				if n, err := strconv.ParseInt(kv.GetValue(), 10, 64); err == nil {
					return n
				}
			}
		}
		if n := expectedBytes(t); n >= 0 {
			return n
		}
		return 0
	}
	if t.RawData != nil {
		return int64(len(t.RawData))
	}
	// Typed fields: count elements at the type's own size, whatever field
	// width the proto uses for them (int32_data holds float16, uint64_data
	// holds uint32).
	if es := ElemSize(DataType(t.GetDataType())); es > 0 {
		elems := len(t.FloatData) + len(t.DoubleData) + len(t.Int64Data) + len(t.Uint64Data) + len(t.Int32Data)
		return int64(es) * int64(elems)
	}
	var n int64
	for _, b := range t.StringData {
		n += int64(len(b))
	}
	return n
}
