#!/usr/bin/env python3
"""Write what onnxruntime's offline graph optimizer makes of a converted
model, to measure with `convert bench --baseline` whether a converted model
survives it (issue 13).

onnxruntime inlines model-local functions when it loads a model; with
SessionOptions.optimized_model_filepath it also saves the result. A user
who optimizes a converted model offline (the usual step before deploying)
gets that file: the ai.linearize nodes replaced by their function bodies,
then rewritten by the graph optimizer at the given level. This script
writes it for each level asked for and checks that it still computes what
the converted model computes on a short unpadded input.

Usage (from the repository root; scripts/bench-baselines.sh --converted
runs it):
  python3 testdata/bench/ort_optimize_converted.py CONVERTED OUT_PREFIX [--levels basic,extended]

writes OUT_PREFIX-basic.onnx, OUT_PREFIX-extended.onnx, ... The level
"all" adds layout transformations tied to this machine's CPU and is not
meant to be saved, so it is not offered. The script creates the fixture
virtual environment (.tools/fixture-venv) if needed and re-runs itself
there. Python only writes these files; no Go test needs it.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fixtures"))
from fixture_venv import ensure_venv  # noqa: E402

ensure_venv()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
}


def feed(session, n):
    """Token ids 1..n, a mask of ones, zero token types: batch 1."""
    out = {}
    for i in session.get_inputs():
        if "mask" in i.name:
            out[i.name] = np.ones((1, n), dtype=np.int64)
        elif "type" in i.name:
            out[i.name] = np.zeros((1, n), dtype=np.int64)
        else:
            out[i.name] = (np.arange(n, dtype=np.int64) % 100 + 1).reshape(1, n)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("converted")
    ap.add_argument("out_prefix")
    ap.add_argument("--levels", default="basic,extended")
    ap.add_argument("--check-len", type=int, default=64)
    args = ap.parse_args()
    print(f"ort_optimize_converted: onnxruntime {ort.__version__}, onnx {onnx.__version__}")
    ref_sess = ort.InferenceSession(args.converted, providers=["CPUExecutionProvider"])
    x = feed(ref_sess, args.check_len)
    ref = ref_sess.run(None, x)[0]
    for level in [s.strip() for s in args.levels.split(",") if s.strip()]:
        if level not in LEVELS:
            sys.exit(f"ort_optimize_converted: level {level!r}: want one of {', '.join(LEVELS)}")
        dst = f"{args.out_prefix}-{level}.onnx"
        so = ort.SessionOptions()
        so.graph_optimization_level = LEVELS[level]
        so.optimized_model_filepath = dst
        ort.InferenceSession(args.converted, so, providers=["CPUExecutionProvider"])
        m = onnx.load(dst, load_external_data=False)
        linear = sum(1 for n in m.graph.node if n.domain == "ai.linearize")
        got = ort.InferenceSession(dst, providers=["CPUExecutionProvider"]).run(None, x)[0]
        diff = float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
        print(f"ort_optimize_converted: {level}: {len(m.graph.node)} nodes, {linear} ai.linearize nodes left, "
              f"output differs from the converted model's by {diff:.2e} of its scale at n = {args.check_len}")
        if diff > 1e-4:
            os.remove(dst)
            sys.exit(f"ort_optimize_converted: {level}: the optimized model computes something else; not written")
        print(f"ort_optimize_converted: wrote {dst}")


if __name__ == "__main__":
    main()
