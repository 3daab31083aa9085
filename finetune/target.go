package finetune

import (
	"fmt"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// This file holds the targets of the projection fits: each converted node
// paired with the original attention block whose output it must
// reproduce, and that output captured from the original model.

// targetNode is a converted node with the original core output it must
// reproduce and the block Detect found for it in the original model.
type targetNode struct {
	node   *onnxpb.NodeProto
	layer  int
	target string
	block  *convert.Block
}

// matchTargets pairs every op node of converted with the attention block
// of original whose head-merged output (Block.Merged) is the node's merged
// output. converted must have a graph (prepareFit, its caller, checks).
func matchTargets(original, converted *onnxpb.ModelProto, op string, minInputs int) ([]targetNode, error) {
	det, err := convert.Detect(original)
	if err != nil {
		return nil, fmt.Errorf("finetune: original model: %w", err)
	}
	byMerged := map[string]*convert.Block{}
	for _, b := range det.Blocks {
		if b.Function != "" {
			continue
		}
		merged := b.Merged
		if merged == "" { // a fused core: no surroundings proved
			merged = infer.MergedValue(original, b.Output)
		}
		byMerged[merged] = b
	}
	cix := onnx.NewIndex(converted.Graph)
	var nodes []targetNode
	for _, n := range converted.Graph.Node {
		if !fitsAs(n, op) {
			continue
		}
		if len(n.Input) < minInputs || len(n.Output) != 1 {
			return nil, fmt.Errorf("finetune: node %s: want at least %d inputs and one output", n.GetName(), minInputs)
		}
		b, ok := byMerged[graphfacts.MergedValue(cix, n.Output[0])]
		if !ok {
			return nil, fmt.Errorf("finetune: node %s: no attention block of the original model produces the same layer output (is the original the model it was converted from?)", n.GetName())
		}
		nodes = append(nodes, targetNode{node: n, layer: b.Layer, target: b.Output, block: b})
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("finetune: the converted model has no %s nodes", op)
	}
	return nodes, nil
}

// prepareFit clones converted and pairs each of its op nodes (with at
// least minInputs inputs) with the original block it must reproduce; it
// returns the clone, the pairs, and the clone's index, graph facts and
// initializer positions, which every fit reads.
func prepareFit(original, converted *onnxpb.ModelProto, op string, minInputs int) (*onnxpb.ModelProto, []targetNode, *onnx.Index, *graphfacts.Facts, map[string]int, error) {
	out := onnx.CloneShared(converted)
	if out.GetGraph() == nil { // the one check: matchTargets and the fits rely on it
		return nil, nil, nil, nil, nil, fmt.Errorf("finetune: converted model has no graph")
	}
	nodes, err := matchTargets(original, out, op, minInputs)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	ix := onnx.NewIndex(out.Graph)
	return out, nodes, ix, graphfacts.New(ix, onnx.OpsetVersion(out, "")), initializerIndex(out.Graph), nil
}

// captureTargets runs the original model once and returns the core
// outputs that nodes must reproduce.
func captureTargets(original *onnxpb.ModelProto, feed map[string]*onnx.Tensor, nodes []targetNode, opt Options) (map[string]*onnx.Tensor, error) {
	var targets []string
	for _, ln := range nodes {
		targets = append(targets, ln.target)
	}
	ref, err := runOnce(original, feed, targets, opt)
	if err != nil {
		return nil, fmt.Errorf("finetune: original model: %w", err)
	}
	return ref, nil
}
