#!/usr/bin/env python3
"""Export the real pretrained model with the real exporter (torch.onnx).

scripts/real-model.sh builds testdata/real/minilm.onnx from the
all-MiniLM-L6-v2 safetensors with the project's own Go builder. This script
is the independent route the issue asks for: it loads the same checkpoint
with transformers (offline, from testdata/real/minilm) and exports it with
PyTorch's exporter to testdata/real/minilm-torch.onnx, so that the Go tests
can check that detection, conversion and validation work on the exporter's
own graph and that both graphs compute the same embeddings.

Python appears only here, as fixture tooling. It re-runs itself in the
virtual environment of testdata/fixtures/gen_fixtures.py
(.tools/fixture-venv, same pinned versions), creating it if needed; torch
from PyPI is large, which is why CI does not run this tier.

Usage (from the repository root, after scripts/real-model.sh):
    python3 testdata/realmodel/export_torch.py [--opset 17]
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SRC = os.path.join(ROOT, "testdata", "real", "minilm")
OUT = os.path.join(ROOT, "testdata", "real", "minilm-torch.onnx")
sys.path.insert(0, os.path.join(ROOT, "testdata", "fixtures"))
from fixture_venv import ensure_venv  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(SRC, "model.safetensors")):
        sys.exit("export_torch: %s missing; run scripts/real-model.sh first" % SRC)
    ensure_venv()
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(SRC, attn_implementation="eager")
    model.eval()

    class Wrapped(torch.nn.Module):
        # Keyword arguments: the positional order of BertModel.forward
        # changes between transformers versions.
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.m(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=token_type_ids, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    ids = torch.tensor([[101, 7592, 2088, 102, 0, 0]], dtype=torch.int64)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]], dtype=torch.int64)
    types = torch.zeros_like(ids)
    tmp = OUT + ".tmp"
    dyn = {0: "batch", 1: "sequence"}
    torch.onnx.export(
        Wrapped(model), (ids, mask, types), tmp,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state", "pooler_output"],
        dynamic_axes={"input_ids": dyn, "attention_mask": dyn, "token_type_ids": dyn,
                      "last_hidden_state": dyn, "pooler_output": {0: "batch"}},
        opset_version=args.opset, dynamo=False)
    os.replace(tmp, OUT)
    print("wrote", os.path.relpath(OUT, ROOT))


if __name__ == "__main__":
    main()
