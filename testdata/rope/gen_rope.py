#!/usr/bin/env python3
"""Build the rotary-scaling reference fixtures of testdata/rope/.

`convert extend-positions` lets a rotary (RoPE) encoder read past the
length it was trained for by rewriting the inverse frequencies its graph
computes cos/sin from (and, for YaRN, scaling cos/sin). The reference is
transformers' own implementation of each method: one small ModernBERT
(3 layers: global, sliding-window, global; head dim 8; trained length 32;
random weights, seed 0) exported four times with TorchScript at opset 17,
the weights identical (the query, key and value weights scaled up so that
the scores are far from uniform), only the global layers' rope_parameters differing:

  base.onnx    rope_type default, rope_theta 160000 (what a user has)
  linear.onnx  rope_type linear, factor 4        (position interpolation)
  ntk.onnx     rope_type default, rope_theta 160000 * 4**(d/(d-2)), d = 8
               (NTK-aware scaling: a larger base)
  yarn.onnx    rope_type yarn, factor 4, original_max_position_embeddings 32
               (YaRN: ramped interpolation, cos/sin scaled by 0.1 ln 4 + 1)

dynamic_ids_N.npy and dynamic_out_N.npy (N = 20, 100): ids and the eager
output of the same model with rope_type dynamic, factor 4 (transformers'
dynamic NTK, which an export would freeze at its traced length).

cached_NAME.onnx are the same four with the rotary embedding stored as cos
and sin tables gathered by position id, the form GTE-v1.5's exports take
(its cos_cached and sin_cached buffers): 32 rows in cached_base.onnx, 128
in the references.

The sliding-window layers keep their rope (a window of 8 never sees a
distance past the trained length). The Go tests convert base.onnx with
each method to 128 positions and compare its outputs at 100 tokens with
the reference's. Regenerate (from the repository root; the script
re-runs itself in .tools/fixture-venv):

    python3 testdata/rope/gen_rope.py

A re-run writes the same bytes.
"""
import copy
import os
import sys
import types

# transformers' ModernBERT iterates a set of layer-type strings when it
# builds the rotary embeddings: string hashing must be fixed for the
# export's node order to be.
if os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
from fixture_venv import ensure_venv  # noqa: E402

ensure_venv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModel, ModernBertConfig  # noqa: E402

TRAINED = 32
FACTOR = 4
THETA = 160000.0
HEAD_DIM = 8


class Wrap(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def config(full):
    c = ModernBertConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, max_position_embeddings=TRAINED, global_attn_every_n_layers=2,
                         local_attention=8, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                         cls_token_id=1, sep_token_id=2)
    c.rope_parameters = {"full_attention": full,
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    return c


def cache(m, rows):
    """Replaces m's rotary embedding by cos and sin tables of rows
    positions gathered by position id, as GTE-v1.5's remote code exports
    them (its cos_cached and sin_cached buffers), computed from the
    frequencies and attention scaling transformers set for each layer
    type."""
    re = m.rotary_emb
    for lt in re.layer_types:
        inv = getattr(re, f"{lt}_inv_freq")
        a = getattr(re, f"{lt}_attention_scaling")
        fr = torch.arange(rows, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat((fr, fr), dim=-1)
        re.register_buffer(f"{lt}_cos_cached", emb.cos() * a, persistent=False)
        re.register_buffer(f"{lt}_sin_cached", emb.sin() * a, persistent=False)

    def forward(self, x, position_ids, layer_type):
        cos = getattr(self, f"{layer_type}_cos_cached")[position_ids]
        sin = getattr(self, f"{layer_type}_sin_cached")[position_ids]
        return cos.to(x.dtype), sin.to(x.dtype)

    re.forward = types.MethodType(forward, re)
    return m


def main():
    d = HEAD_DIM
    variants = {
        "base": {"rope_type": "default", "rope_theta": THETA},
        "linear": {"rope_type": "linear", "rope_theta": THETA, "factor": float(FACTOR)},
        "ntk": {"rope_type": "default", "rope_theta": THETA * FACTOR ** (d / (d - 2))},
        "yarn": {"rope_type": "yarn", "rope_theta": THETA, "factor": float(FACTOR),
                 "original_max_position_embeddings": TRAINED},
    }
    torch.manual_seed(0)
    base = AutoModel.from_config(config(variants["base"]), attn_implementation="eager").eval()
    state = copy.deepcopy(base.state_dict())
    # ModernBERT's initialiser (std 0.02) leaves random attention nearly
    # uniform, where the rotation hardly matters: larger query and key
    # weights make the scores, and so the methods' differences, large.
    for k in state:
        if k.endswith("attn.Wqkv.weight"):
            state[k] = state[k] * 40
    # Traced at 16 tokens, within the cached base's 32 rows.
    ids = torch.randint(4, 60, (1, 16))
    mask = torch.ones(1, 16, dtype=torch.int64)
    exports = []
    for name, full in variants.items():
        exports.append((name, full, None))
        # The same models with cos/sin tables: the base of the trained
        # length's rows, the references of the extended length's.
        exports.append(("cached_" + name, full, TRAINED if name == "base" else FACTOR * TRAINED))
    for name, full, rows in exports:
        m = AutoModel.from_config(config(full), attn_implementation="eager").eval()
        m.load_state_dict(state)
        if rows:
            cache(m, rows)
        path = os.path.join(HERE, name + ".onnx")
        torch.onnx.export(Wrap(m).eval(), (ids, mask), path, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                        "last_hidden_state": {0: "batch", 1: "seq"}},
                          opset_version=17, dynamo=False, do_constant_folding=True)
        print("wrote", path, os.path.getsize(path))
    # transformers' dynamic NTK recomputes the frequencies from each
    # input's length in Python, which an export freezes at the traced
    # length: its reference is the eager model's output, on fixed ids at
    # 20 tokens (within the trained length: the base model's output) and
    # at 100, each from a fresh model (the rotary module keeps the longest
    # length it saw).
    full = {"rope_type": "dynamic", "rope_theta": THETA, "factor": float(FACTOR)}
    rng = np.random.default_rng(5)
    for n in (20, 100):
        m = AutoModel.from_config(config(full), attn_implementation="eager").eval()
        m.load_state_dict(state)
        ids = rng.integers(4, 60, (1, n)).astype(np.int64)
        with torch.no_grad():
            out = Wrap(m)(torch.from_numpy(ids), torch.ones(1, n, dtype=torch.int64)).numpy()
        np.save(os.path.join(HERE, "dynamic_ids_%d.npy" % n), ids)
        np.save(os.path.join(HERE, "dynamic_out_%d.npy" % n), out.astype(np.float32))
        print("wrote dynamic reference at", n, "tokens")


if __name__ == "__main__":
    main()
