#!/usr/bin/env python3
"""Build testdata/tokenizers/prompt_cases.json: the reference for embed's
prompts (embed.Options.Prompt).

sentence-transformers applies a prompt by tokenizing prompt + text as one
string. embed instead tokenizes the prompt without its trailing white space
once, and the text with that white space before it, so that every chunk of
a long text can begin with the same prompt wordpieces. This file records,
for each committed tokenizer and for the real MiniLM tokenizer when
scripts/real-model.sh has laid it out, the ids Hugging Face `tokenizers`
gives prompt + text with the special tokens added: what embed's pass must
equal.

  {"<tokenizer dir>": [{"prompt", "text", "ids", "spaced_ids",
                         "prompt_ids"}, ...], ...}

"spaced_ids" are the ids of prompt + " " + text: what embed reads when
the prompt does not end in white space and the tokenizer marks the start
of a text (byte-level BPE with add_prefix_space, SentencePiece's
Metaspace), because embed tokenizes the text apart from the prompt.

"prompt_ids" are the ids of the prompt alone, special tokens added.
sentence-transformers leaves the first len(prompt_ids) - 1 tokens of a
pass out of the pooling when the Pooling module sets include_prompt
false (its prompt_length): the count embed must leave out too.

Usage (from the repository root; the script re-runs itself in
.tools/fixture-venv, which has `tokenizers`):
    python3 testdata/tokenizers/gen_prompt.py
A re-run rewrites identical bytes. The Go tests need no Python.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
from fixture_venv import ensure_venv  # noqa: E402

ensure_venv()

from tokenizers import Tokenizer  # noqa: E402

# Prompts as published models' config_sentence_transformers.json give
# them (nomic-embed-text, e5, bge/arctic, jina-embeddings-v3), and edge
# forms: no trailing space, two trailing spaces, a newline, non-ASCII.
PROMPTS = [
    "search_query: ",
    "search_document: ",
    "query: ",
    "Represent this sentence for searching relevant passages: ",
    "Represent the document for retrieval: ",
    "classification:",
    "passage:  ",
    "Instruct: Given a question, retrieve passages\nQuery: ",
    "Question\u00a0: ",
    "检索: ",
]

TEXTS = [
    "What is the capital of France?",
    "",
    " leading space, and trailing ",
    "naïve café — Zürich, 東京 and Ελληνικά.",
    "Line one.\nLine two\tafter a tab.",
    "don't stop-believing: 3.14159 (approx.)",
    "  two leading spaces",
]

DIRS = ["modernbert-bpe", "roberta-bpe", "xlmr-unigram", "xlmr-unigram-first",
        "xlmr-unigram-metafirst", "xlmr-unigram-converter"]


def main():
    out = {}
    paths = [(d, os.path.join(HERE, d, "tokenizer.json")) for d in DIRS]
    real = os.path.join(ROOT, "testdata", "real", "minilm", "tokenizer.json")
    if os.path.exists(real):
        paths.append(("real/minilm", real))
    else:
        sys.exit("gen_prompt.py: %s is missing; run scripts/real-model.sh first" % real)
    for name, path in paths:
        tok = Tokenizer.from_file(path)
        tok.no_padding()
        tok.no_truncation()
        cases = []
        for p in PROMPTS:
            for t in TEXTS:
                cases.append({"prompt": p, "text": t, "ids": tok.encode(p + t).ids,
                              "spaced_ids": tok.encode(p + " " + t).ids,
                              "prompt_ids": tok.encode(p).ids})
        out[name] = cases
    with open(os.path.join(HERE, "prompt_cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
