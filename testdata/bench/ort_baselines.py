#!/usr/bin/env python3
"""Write onnxruntime's optimized forms of the bench model, the baselines of
`convert bench --baseline NAME=FILE` (issue 13).

From ORIGINAL (the model `convert bench` takes, e.g. written by
`linlab build-model --preset base --layers 2 --max-positions 16384`) it
writes into OUTDIR:

  fused.onnx  onnxruntime.transformers.optimizer.optimize_model with its
              defaults for model_type "bert": what a user deploying on CPU
              runs. Attention is the com.microsoft Attention op (packed QKV,
              the mask as a mask index); the CPU kernel materialises the
              H·n·n scores once.
  flash.onnx  the same optimizer with use_multi_head_attention and the
              attention mask disabled: com.microsoft MultiHeadAttention with
              no key_padding_mask and no attention_bias, which onnxruntime's
              CPU kernel runs as flash attention (memory linear in n). Without
              a mask it equals the original only on unpadded input, which is
              what the bench feeds (batch 1, mask of ones).

Each output is checked before it is kept: it must hold one fused attention
node per softmax-attention block of the original (so the bench never
compares against a model the optimizer left unfused), and onnxruntime must
give the original's output on a short unpadded input.

Usage (from the repository root; scripts/bench-baselines.sh runs it):
  python3 testdata/bench/ort_baselines.py ORIGINAL OUTDIR [--heads N --hidden H] [--check-len L]

The script creates the fixture virtual environment (.tools/fixture-venv,
gitignored; pins in testdata/fixtures/fixture_venv.py) if needed and
re-runs itself there. Python only writes these files; no Go test needs it.
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
from onnxruntime.transformers.fusion_options import FusionOptions  # noqa: E402
from onnxruntime.transformers.optimizer import optimize_model  # noqa: E402


def count_ops(model, domain, op_type):
    return sum(1 for n in model.graph.node if n.op_type == op_type and (n.domain or "") == domain)


def optimize(src, dst, heads, hidden, flash):
    """Run the transformers optimizer on src and save the result as dst."""
    opts = FusionOptions("bert")
    if flash:
        opts.use_multi_head_attention = True
        opts.disable_attention_mask()
    opt = optimize_model(src, model_type="bert", num_heads=heads, hidden_size=hidden,
                         optimization_options=opts)
    opt.save_model_to_file(dst)
    return onnx.load(dst)


def check_fused(name, model, blocks, flash):
    """Exit unless model holds `blocks` fused attention nodes of the form
    the baseline is named for."""
    att = count_ops(model, "com.microsoft", "Attention")
    mha = [n for n in model.graph.node if n.op_type == "MultiHeadAttention" and n.domain == "com.microsoft"]
    softmax = count_ops(model, "", "Softmax")
    if flash:
        masked = [n.name for n in mha if any(i for i in n.input[4:6])]
        ok = len(mha) == blocks and att == 0 and not masked
        what = f"{len(mha)} MultiHeadAttention ({len(masked)} with a mask or bias), {att} Attention"
    else:
        ok = att + len(mha) == blocks
        what = f"{att} Attention, {len(mha)} MultiHeadAttention"
    print(f"ort_baselines: {name}: {what}, {softmax} Softmax left; the original has {blocks} attention blocks")
    if not ok:
        sys.exit(f"ort_baselines: {name}: the optimizer did not fuse every attention block as expected; not writing a baseline that would compare against a partly unfused model")


def feed(session, n):
    """Batch-1 inputs of length n: token ids from a fixed seed, a mask of
    ones, token types 0, position ids 0..n-1 (what the bench feeds)."""
    rng = np.random.default_rng(n)
    out = {}
    for i in session.get_inputs():
        name = i.name.lower()
        dtype = np.int32 if "int32" in i.type else np.int64
        if "mask" in name:
            v = np.ones((1, n), dtype)
        elif "position" in name:
            v = np.arange(n, dtype=dtype)[None, :]
        elif "type" in name:
            v = np.zeros((1, n), dtype)
        else:
            v = rng.integers(0, 100, size=(1, n)).astype(dtype)
        out[i.name] = v
    return out


def check_same_output(name, original, path, n):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(original, so, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    inputs = feed(ref, n)
    want = ref.run(None, inputs)[0]
    have = got.run(None, {k: v for k, v in inputs.items() if k in {i.name for i in got.get_inputs()}})[0]
    if want.shape != have.shape:
        sys.exit(f"ort_baselines: {name}: output shape {have.shape}, the original's {want.shape}")
    err = float(np.max(np.abs(want - have)) / max(1e-12, float(np.max(np.abs(want)))))
    print(f"ort_baselines: {name}: largest output difference from the original at n = {n}: {err:.2e} of its scale")
    if not err < 1e-3:
        sys.exit(f"ort_baselines: {name}: output differs from the original by {err:.2e} of its scale")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("original")
    ap.add_argument("outdir")
    ap.add_argument("--heads", type=int, default=0, help="attention heads (0: the optimizer reads them from the graph)")
    ap.add_argument("--hidden", type=int, default=0, help="hidden size (0: read from the graph)")
    ap.add_argument("--check-len", type=int, default=64, help="sequence length of the output check")
    args = ap.parse_args()
    if not os.path.isfile(args.original):
        sys.exit(f"ort_baselines: {args.original}: no such model file")
    os.makedirs(args.outdir, exist_ok=True)
    orig = onnx.load(args.original)
    blocks = count_ops(orig, "", "Softmax")
    if blocks == 0:
        sys.exit(f"ort_baselines: {args.original}: no Softmax; not a softmax-attention model")
    print(f"ort_baselines: onnxruntime {ort.__version__}, onnx {onnx.__version__}")
    for name, flash in (("fused", False), ("flash", True)):
        dst = os.path.join(args.outdir, name + ".onnx")
        tmp = dst + ".tmp"
        m = optimize(args.original, tmp, args.heads, args.hidden, flash)
        check_fused(name, m, blocks, flash)
        check_same_output(name, args.original, tmp, args.check_len)
        os.replace(tmp, dst)
        print(f"ort_baselines: wrote {dst}")


if __name__ == "__main__":
    main()
