"""Spec check of converted models with the Python onnx tools (fixture
tooling only: the product path is Go and onnxruntime).

For each conversion of testdata/bert-tiny.onnx and of a ModernBERT-shaped
model (linlab build-model --family modernbert --preset tiny, whose
sliding-window layers become WindowAttention), written by the Go CLI:

  1. onnx.checker.check_model(full_check=True) accepts it;
  2. onnx's reference evaluator (onnx.reference.ReferenceEvaluator, which
     runs the model-local functions from their bodies) gives onnxruntime's
     outputs on the same seeded inputs;
  3. onnx.inliner.inline_local_functions leaves no model-local function,
     onnx.version_converter takes the inlined model to opset TARGET_OPSET,
     the checker accepts both, and onnxruntime gives the function form's
     outputs on both.

Run from anywhere:

  python3 testdata/spec/check_spec.py          (creates .tools/onnx-venv on first use)
  python3 testdata/spec/check_spec.py --venv   (only create the venv; .ci/run)

The Go test TestSpecTools (cmd/convert) runs this script with the venv's
python, and skips, naming this command, when the venv is missing.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from onnx_venv import ROOT, ensure_venv  # noqa: E402

TARGET_OPSET = 21
SEQ, BATCH, PAD = 16, 2, 5
# Reference evaluator against onnxruntime: both float32, different
# summation orders and exp implementations.
REF_TOL = 1e-5
# A float16 model's half-precision ops round differently in the two, and
# in onnxruntime at another opset (other kernels and fusions); its
# attention bodies compute in float32 between casts.
HALF_TOL = 1e-2
# onnxruntime against itself on the inlined and upgraded graph (it inlines
# the same bodies when it loads the function form).
ORT_TOL = 2e-6

BERT = os.path.join(ROOT, "testdata", "bert-tiny.onnx")
FP16 = os.path.join(ROOT, "testdata", "fixtures", "published", "minilm_eager_op17.fp16_ortx.onnx")

# (name, source: "bert", "modernbert" or "fp16" (a published float16 copy,
# whose function bodies are typed), convert arguments after the model)
CONVERSIONS = [
    ("performer", "bert", ["performer", "--features", "16"]),
    ("performer-favorplus", "bert", ["performer", "--features", "16", "--center=false", "--features-kind", "favor+"]),
    ("linformer-pool", "bert", ["linformer", "--k", "4"]),
    ("linformer-gaussian", "bert", ["linformer", "--init", "gaussian", "--k", "4", "--max-len", "32"]),
    ("local-pooled", "bert", ["local-pooled", "--block", "4", "--segments", "2"]),
    ("local-pooled-inline", "bert", ["local-pooled", "--block", "4", "--segments", "2", "--inline"]),
    ("lara", "bert", ["lara", "--landmarks", "4"]),
    ("hedgehog", "bert", ["hedgehog", "--block", "4", "--features", "4", "--steps", "0"]),
    ("long-far", "bert", ["long", "--window", "8", "--max-length", "256", "--far", "--segments", "2", "--far-bias", "-0.5"]),
    ("modernbert-window", "modernbert", ["window"]),
    ("modernbert-local-pooled", "modernbert", ["local-pooled", "--block", "4", "--segments", "2"]),
    ("modernbert-performer", "modernbert", ["performer", "--features", "16"]),
    ("fp16-local-pooled", "fp16", ["local-pooled", "--block", "4", "--segments", "2"]),
    ("fp16-hedgehog", "fp16", ["hedgehog", "--block", "4", "--features", "4", "--steps", "0"]),
]


def run(cmd):
    r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), r.returncode, r.stdout))


def build_models(tmp):
    """Build the CLI and write every conversion; returns {name: path}."""
    conv, lab = os.path.join(tmp, "convert"), os.path.join(tmp, "linlab")
    run(["go", "build", "-o", conv, "./cmd/convert"])
    run(["go", "build", "-o", lab, "./cmd/linlab"])
    modern = os.path.join(tmp, "modernbert.onnx")
    run([lab, "build-model", "--family", "modernbert", "--preset", "tiny", "-o", modern])
    src = {"bert": BERT, "modernbert": modern, "fp16": FP16}
    out = {}
    for name, source, args in CONVERSIONS:
        path = os.path.join(tmp, name + ".onnx")
        run([conv, args[0], src[source], "-o", path] + args[1:])
        out[name] = path
    return out


def feed_for(model, np):
    """Seeded inputs: ids 1..99, the last row padded after SEQ-PAD tokens,
    token types 0, floats N(0,1)."""
    rng = np.random.default_rng(8)
    inits = {t.name for t in model.graph.initializer}
    feed = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else (BATCH if k == 0 else SEQ) for k, d in enumerate(tt.shape.dim)]
        name = i.name.lower()
        if tt.elem_type in (6, 7):  # int32, int64
            dt = np.int64 if tt.elem_type == 7 else np.int32
            if "mask" in name:
                x = np.ones(shape, dt)
                x[-1, SEQ - PAD:] = 0
            elif "type" in name or "position" in name:
                x = np.zeros(shape, dt) if "type" in name else np.broadcast_to(np.arange(shape[-1], dtype=dt), shape).copy()
            else:
                x = rng.integers(1, 100, size=shape).astype(dt)
        else:
            x = rng.standard_normal(shape).astype(np.float32)
        feed[i.name] = x
    return feed


def max_rel(a, b, np):
    """Largest |a − b| over the largest |a| (each output), the worst."""
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape:
            return float("inf")
        worst = max(worst, float(np.abs(x - y).max()) / max(1.0, float(np.abs(x).max())))
    return worst


def check(name, path):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import inliner, version_converter
    from onnx.reference import ReferenceEvaluator

    m = onnx.load(path)
    has_fn = len(m.functions) > 0
    if has_fn and any(len(f.attribute_proto) for f in m.functions) and m.ir_version < 9:
        raise AssertionError("ir_version %d with function attribute defaults (IR 9)" % m.ir_version)
    onnx.checker.check_model(m, full_check=True)
    feed = feed_for(m, np)

    def ort_run(model):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return s.run(None, feed)

    want = ort_run(m)
    ref = ReferenceEvaluator(m).run(None, feed)
    d_ref = max_rel(want, ref, np)
    half = any(t.data_type == onnx.TensorProto.FLOAT16 for t in m.graph.initializer)
    tol, ort_tol = (HALF_TOL, HALF_TOL) if half else (REF_TOL, ORT_TOL)
    if not d_ref <= tol:
        raise AssertionError("reference evaluator vs onnxruntime: relative difference %.3g > %g" % (d_ref, tol))

    inl = inliner.inline_local_functions(m)
    if len(inl.functions) or any(n.domain not in ("", "ai.onnx") for n in inl.graph.node):
        raise AssertionError("inline_local_functions left functions or custom nodes")
    onnx.checker.check_model(inl, full_check=True)
    d_inl = max_rel(want, ort_run(inl), np)
    opset = next(o.version for o in inl.opset_import if o.domain in ("", "ai.onnx"))
    target = max(TARGET_OPSET, opset)
    up = version_converter.convert_version(inl, target)
    onnx.checker.check_model(up, full_check=True)
    d_up = max_rel(want, ort_run(up), np)
    if not (d_inl <= ort_tol and d_up <= ort_tol):
        raise AssertionError("onnxruntime, inlined %.3g and at opset %d %.3g relative to the function form (> %g)" % (d_inl, target, d_up, ort_tol))
    return "ir %d, opset %d→%d, %d functions: ref %.2g, inlined %.2g, upgraded %.2g" % (m.ir_version, opset, target, len(m.functions), d_ref, d_inl, d_up)


def main():
    if "--venv" in sys.argv[1:]:
        ensure_venv()
        print("check_spec: venv ready: %s" % sys.prefix)
        return 0
    ensure_venv()
    start = time.time()
    failed = []
    with tempfile.TemporaryDirectory(prefix="linearize-spec-") as tmp:
        models = build_models(tmp)
        for name, path in models.items():
            try:
                print("check_spec: %-26s ok  %s" % (name, check(name, path)), flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                failed.append(name)
                print("check_spec: %-26s FAIL %s: %s" % (name, type(e).__name__, e), flush=True)
    print("check_spec: %d conversions, %d failed, %.0f s" % (len(CONVERSIONS), len(failed), time.time() - start))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
