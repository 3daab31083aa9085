#!/usr/bin/env python3
"""Embed a JSONL corpus on Ray Data with a model written by linearize's
`convert`, and produce the vectors `convert embed` produces.

    python recipes/ray/embed_ray.py MODEL.onnx --jsonl corpus.jsonl -o out/

reads corpus.jsonl (one {"id": ..., "text": ...} object per line, the
format of `convert embed --jsonl`), tokenizes each text with the tokenizer
files `convert` copied beside the model (the folder named like the model:
MODEL/tokenizer.json or MODEL/vocab.txt), runs the model with onnxruntime's
Python API in a Ray Data actor pool (each actor loads the session once),
pools the hidden states as the sentence-transformers files beside the model
say (MODEL/modules.json, MODEL/1_Pooling/config.json), and writes a folder
of parts in the format of `convert embed -o out/`:

    out/part-00000.npy      float32 [vectors, dim], documents in input order
    out/part-00000.ids.txt  one id per line
    ...
    out/manifest.json       model and tokenizer SHA-256, settings, parts

committed as `convert embed` commits them: while the run lasts, each part
is listed by its own record (out/part-00000.json, its manifest entry),
written after its files, so a commit costs the same at the ten-thousandth
part as at the first; at the end manifest.json is written listing every
part, marked complete, and the records are removed.

The manifest holds the fields `convert embed` writes (format
linearize-embed-parts/1), so `convert embed-merge out/` verifies the
folder, and the shards of a run (--shard I/N) merge with embed-merge
whether each was written by this recipe or by `convert embed` with the same
flags: the model's SHA-256, the tokenizer files, the mode, pooling, window,
max tokens ... must agree.

The settings follow `convert embed` flag for flag (--mode, --pooling,
--raw, --max-tokens, --window, --chunk-overlap, --batch, --part-size,
--shard, --skip-bad-docs, --vocab), with the same defaults, worked out from
the same files; the flags under "Ray" say how the work is spread. One
difference: `convert` reads a model's context limit from its position
table, this recipe from the config.json beside it (or the doc string). When
the two differ (a model whose table `extend-positions` grew), pass
--window, and compare the manifest with one `convert embed` writes (the
window is in it).

Ray: without --address the script starts a Ray instance on this machine
(--num-cpus CPUs, no dashboard); with --address it joins a cluster, whose
workers must see MODEL, its companion folder and the JSONL file at the same
paths (shared storage) and have the packages of requirements.txt.

Unlike `convert embed`, the recipe does not resume (Ray retries failed
tasks itself; a failed run leaves a manifest that is not complete, which
embed-merge refuses: run again into a new folder), reads no stdin, and
writes .npy parts only.

Python is recipe tooling here: the product path is the Go CLI. The test
cmd/convert/ray_recipe_test.go runs this script (with .tools/ray-venv,
made by scripts/ray-venv.sh) beside `convert embed` and requires the same
ids in the same order, the same tokens and per-document cosine >= 0.99999.

Exit codes, as `convert`'s: 0 ok, 1 usage, 2 bad input (a file, its data,
or a model the flags do not fit), 3 runtime failure.
"""

import argparse
import hashlib
import json
import logging
import os
import re
import sys
import time
import warnings

import numpy as np

# ---------------------------------------------------------------------------
# Constants shared with the Go code (the names in brackets are where they
# live there).

# The files `convert` copies beside a model it writes [tokenize.Companions];
# the manifest lists the SHA-256 of those present, in this order.
COMPANIONS = [
    "tokenizer.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
]

PARTS_FORMAT = "linearize-embed-parts/1"  # [embed.PartsFormat]
MANIFEST = "manifest.json"  # [embed.ManifestName]
DEFAULT_BATCH = 8  # texts or chunks per run [embed.DefaultBatch]
MAX_BATCH_TOKENS = 4096  # tokens of one batched run [embed maxBatchTokens]
LONG_CONTEXT = 512  # auto mode reads models above this whole [embed.LongContext]
MAX_CONTEXT_TOKENS = 1 << 20  # [convert.MaxContextTokens]
META_WINDOW = "linearize.window"  # metadata of `convert long` models
META_MAX_LENGTH = "linearize.max_length"

# Exit codes [cmd/internal/cli].
EXIT_USAGE, EXIT_BAD_INPUT, EXIT_RUNTIME = 1, 2, 3


class BadInput(Exception):
    """A file, its data, or a model the flags do not fit (exit 2)."""


def log(msg):
    print("embed_ray: " + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# The files beside the model.

def model_dirs(model):
    """The folders searched for the files that belong to the model, in
    order: its own folder, then the folder named like it without its
    extension (out/m.onnx -> out/m/, where `convert` copies them)."""
    return [os.path.dirname(model) or ".", os.path.splitext(model)[0]]


def companion_dir(model):
    """The first of model_dirs holding a tokenizer.json or vocab.txt, or
    None [tokenize.CompanionDir]."""
    for d in model_dirs(model):
        if any(os.path.isfile(os.path.join(d, f)) for f in ("tokenizer.json", "vocab.txt")):
            return d
    return None


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tokenizer_files(model, vocab):
    """The manifest's "tokenizer" list: name and SHA-256 of every companion
    file present in the tokenizer's folder (the one --vocab names, else the
    model's companion folder), --vocab's file first when it names one
    [embed.TokenizerFiles]."""
    if vocab:
        folder = vocab if os.path.isdir(vocab) else os.path.dirname(vocab)
    else:
        folder = companion_dir(model)
    out, seen = [], set()

    def add(path):
        if path in seen or not os.path.isfile(path):
            return
        seen.add(path)
        rel = os.path.relpath(path, folder) if folder else os.path.basename(path)
        out.append({"file": rel.replace(os.sep, "/"), "sha256": file_sha256(path)})

    if vocab:
        add(vocab)
    if folder:
        for name in COMPANIONS:
            add(os.path.join(folder, name))
    # Go writes null for no files, and compares null and [] as different.
    return out or None


def read_json(path, limit=1 << 20):
    """A JSON file of at most limit bytes (1 MiB: the configuration files;
    a tokenizer.json is read with a larger one)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BadInput(f"{path}: larger than {limit} bytes")
    try:
        return json.loads(data)
    except ValueError as e:
        raise BadInput(f"{path}: {e}") from None


# ---------------------------------------------------------------------------
# The tokenizer: BERT WordPiece, as the Go tokenizer reads it [tokenize].
#
# Both forms are run by Hugging Face `tokenizers`: tokenizer.json as it is
# written, vocab.txt through the same components (BertNormalizer,
# BertPreTokenizer, WordPiece) set from tokenizer_config.json as the Go
# loader sets them. The Go tokenizer implements those same steps (clean
# text, CJK spacing, NFD and accent stripping, lower case, split on
# whitespace and punctuation, greedy longest-match wordpieces, words over
# max_input_chars_per_word characters as [UNK], the special tokens kept
# whole where the text spells them); the test compares the ids of both on
# every document. (Go keeps whole the [PAD], [UNK], [CLS], [SEP] and
# [MASK] the files name, `tokenizers` the added_tokens of tokenizer.json:
# the same five in BERT-style files.)

def token_name(v):
    """A special-token entry: a string or {"content": ...}."""
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def load_tokenizer(model, vocab):
    """Returns (tokenizer, cls id, sep id, pad id) for the model's
    tokenizer: --vocab's (a folder, tokenizer.json or vocab.txt), else the
    companion folder's tokenizer.json, else its vocab.txt."""
    from tokenizers import Tokenizer

    path = vocab
    if path and os.path.isdir(path):
        path = next((os.path.join(vocab, f) for f in ("tokenizer.json", "vocab.txt")
                     if os.path.isfile(os.path.join(vocab, f))), None)
        if path is None:
            raise BadInput(f"{vocab}: no tokenizer.json or vocab.txt")
    if not path:
        folder = companion_dir(model)
        if folder is None:
            dirs = model_dirs(model)
            raise BadInput(f"no tokenizer.json or vocab.txt in {dirs[0]} or {dirs[1]}; pass --vocab PATH")
        path = os.path.join(folder, "tokenizer.json")
        if not os.path.isfile(path):
            path = os.path.join(folder, "vocab.txt")

    names = {"unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]"}
    if path.endswith(".json"):
        spec = read_json(path, 64 << 20)
        if spec.get("model", {}).get("type") != "WordPiece":
            raise BadInput(f"{path}: model type {spec.get('model', {}).get('type')!r}, only WordPiece is supported (as by convert)")
        norm = spec.get("normalizer")
        if norm is not None and norm.get("type") != "BertNormalizer":
            raise BadInput(f"{path}: normalizer {norm.get('type')!r}, only BertNormalizer is supported (as by convert)")
        pre = spec.get("pre_tokenizer")
        if pre is not None and pre.get("type") != "BertPreTokenizer":
            raise BadInput(f"{path}: pre-tokenizer {pre.get('type')!r}, only BertPreTokenizer is supported (as by convert)")
        post = spec.get("post_processor") or {}
        if post.get("type") == "BertProcessing":
            # BertProcessing names its markers as [token, id] pairs.
            for key in ("cls", "sep"):
                if post.get(key):
                    names[key] = token_name(post[key][0]) or names[key]
        if (spec.get("padding") or {}).get("pad_token"):
            names["pad"] = spec["padding"]["pad_token"]
        tok = Tokenizer.from_file(path)
    else:
        tok, names = vocab_tokenizer(path, names)
    # The file's own truncation and padding (all-MiniLM-L6-v2's cuts at 128
    # tokens) do not apply: the window and --max-tokens say what is read.
    tok.no_truncation()
    tok.no_padding()
    ids = {}
    for key in ("cls", "sep", "pad"):
        ids[key] = tok.token_to_id(names[key])
        if ids[key] is None:
            raise BadInput(f"{path}: the {key} token {names[key]!r} is not in the vocabulary")
    return tok, ids["cls"], ids["sep"], ids["pad"]


def vocab_tokenizer(path, names):
    """A WordPiece tokenizer from vocab.txt (one token per line, the line
    number is its id; a token listed twice keeps its first id) with the
    settings of the tokenizer_config.json beside it, as convert reads it
    [tokenize.LoadVocab]."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line
    vocab = {}
    for i, line in enumerate(lines):
        vocab.setdefault(line.rstrip("\r"), i)
    lower, strip, chinese = True, None, True
    cfg = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    if os.path.isfile(cfg):
        try:
            c = read_json(cfg)
        except BadInput:
            c = {}  # convert ignores a config it cannot read
        if isinstance(c, dict):
            if isinstance(c.get("do_lower_case"), bool):
                lower = c["do_lower_case"]
            if isinstance(c.get("strip_accents"), bool):
                strip = c["strip_accents"]
            if isinstance(c.get("tokenize_chinese_chars"), bool):
                chinese = c["tokenize_chinese_chars"]
            for key in names:
                n = token_name(c.get(key + "_token"))
                if n:
                    names[key] = n
    if names["unk"] not in vocab:
        raise BadInput(f"{path}: the unknown token {names['unk']!r} is not in the vocabulary")
    tok = Tokenizer(models.WordPiece(vocab, unk_token=names["unk"], max_input_chars_per_word=100))
    # strip_accents None follows lowercase, in both implementations.
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=chinese,
                                                strip_accents=strip, lowercase=lower)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # The special tokens of the vocabulary are kept whole where a text
    # spells them ("[MASK]"), as the Go tokenizer does.
    tok.add_special_tokens([names[k] for k in ("pad", "unk", "cls", "sep", "mask") if names[k] in vocab])
    return tok, names


# ---------------------------------------------------------------------------
# Settings: pooling, context limit, window and mode, resolved as `convert
# embed` resolves them [embed.Open].

def read_pooling(model):
    """The pooling the sentence-transformers files beside the model set
    (modules.json of the first of model_dirs that has one, and its Pooling
    module's config.json); mean when there are none [embed readSTConfig]."""
    for d in model_dirs(model):
        p = os.path.join(d, "modules.json")
        if not os.path.isfile(p):
            continue
        mods = read_json(p)
        pooling = None
        for m in mods if isinstance(mods, list) else []:
            if str(m.get("type", "")).endswith("Pooling"):
                if pooling is not None:
                    raise BadInput(f"{p} lists more than one Pooling module")
                pooling = pooling_config(os.path.join(d, m.get("path", ""), "config.json"))
        return pooling or "mean"
    return "mean"


def pooling_config(p):
    """The one pooling a sentence-transformers Pooling config.json sets."""
    c = read_json(p)
    flags = {"cls": bool(c.get("pooling_mode_cls_token")), "mean": bool(c.get("pooling_mode_mean_tokens")),
             "max": bool(c.get("pooling_mode_max_tokens"))}
    mode = c.get("pooling_mode") or ""
    if mode in flags:
        flags[mode] = True
    elif mode:
        raise BadInput(f"{p}: pooling_mode {mode!r} is not supported (mean, cls or max)")
    if any(c.get(k) for k in ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")):
        raise BadInput(f"{p}: a pooling mode other than mean, cls or max is set; choose one of those explicitly")
    on = [k for k in ("cls", "mean", "max") if flags[k]]
    if len(on) != 1:
        raise BadInput(f"{p} sets {len(on)} pooling modes; choose one explicitly (--pooling)")
    return on[0]


def tokens_value(v):
    """A context limit: a JSON number that is an integer from 1 to
    MAX_CONTEXT_TOKENS (8192.0 is one; 8192.5 and "8192" are not)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or not 1 <= v <= MAX_CONTEXT_TOKENS:
        raise BadInput(f"context limit {v!r}: want an integer from 1 to {MAX_CONTEXT_TOKENS}")
    return int(v)


DOC_LIMIT_RE = [re.compile(r'\bmax_position_embeddings"?\s*[:=]?\s*(\d+)\b'),
                re.compile(r'(?:^|[,;:(]\s*)positions\s*[:=]?\s*(\d+)\b')]


def context_limit(model, doc_string):
    """The longest input the model reads, in tokens, and where that comes
    from: the first config.json of model_dirs (max_position_embeddings or
    n_positions), else the model's doc string; (0, None) when neither says.
    (convert reads the model's position table first: see the module doc.)
    [convert.ContextLimit]"""
    for d in model_dirs(model):
        p = os.path.join(d, "config.json")
        if not os.path.isfile(p):
            continue
        c = read_json(p)
        if not isinstance(c, dict):
            raise BadInput(f"{p}: not a JSON object")
        for key in ("max_position_embeddings", "n_positions"):
            if key in c:
                return tokens_value(c[key]), f"{p}: {key}"
        return 0, None
    for r in DOC_LIMIT_RE:
        m = r.search(doc_string or "")
        if m:
            return tokens_value(int(m.group(1))), "the model's doc string"
    return 0, None


def input_role(name):
    """What feeds a model input, by its name [infer.InputRole]."""
    n = name.lower()
    if "position" in n:
        return "position"
    if "type" in n or "segment" in n:
        return "type"
    if "mask" in n:
        return "mask"
    if "ids" in n or "input" in n or "token" in n:
        return "ids"
    return None


def fixed(dim):
    return dim if isinstance(dim, int) and dim > 0 else 0


def open_session(model, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    if threads > 0:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def resolve(args):
    """Works out every setting from the flags, the model and the files
    beside it, as `convert embed` does; returns a dict the embedding actors
    are built from (and the manifest's "settings" are taken from)."""
    sess = open_session(args.model, args.threads)
    meta = sess.get_modelmeta()
    props = meta.custom_metadata_map or {}

    def meta_int(key):
        if key not in props:
            return None
        try:
            n = int(props[key].strip())
        except ValueError:
            n = 0
        if n < 3:
            raise BadInput(f"{args.model}: metadata {key} = {props[key]!r} is not a number of at least 3 tokens")
        return n

    meta_window = meta_int(META_WINDOW)
    long_model = meta_window is not None
    limit, limit_src = context_limit(args.model, meta.description)
    if long_model and meta_int(META_MAX_LENGTH) is not None:
        limit, limit_src = meta_int(META_MAX_LENGTH), "metadata " + META_MAX_LENGTH

    window = args.window or meta_window or limit or 512
    mode = args.mode
    if mode == "auto":
        mode = "long" if long_model or (args.window == 0 and limit > LONG_CONTEXT) else "chunk"
    if mode != "long" and limit > 0 and window > limit:
        raise BadInput(f"window {window} is longer than model {args.model} admits ({limit} tokens, from {limit_src})")
    if args.chunk_overlap and args.chunk_overlap >= window - 2:
        raise BadInput(f"an overlap of {args.chunk_overlap} wordpieces leaves no new wordpiece in a window of {window} tokens")

    pooling = args.pooling
    if pooling == "auto":
        pooling = read_pooling(args.model)

    inputs, fixed_seq, fixed_rows, has_mask = [], 0, 0, False
    for i in sess.get_inputs():
        role = input_role(i.name)
        if role is None:
            raise BadInput(f"{args.model}: cannot fill input {i.name!r} from text (not ids, mask, token types or positions by its name)")
        if len(i.shape) not in (0, 2):
            raise BadInput(f"{args.model}: input {i.name!r} has rank {len(i.shape)}, want [batch, sequence]")
        if len(i.shape) == 2:
            fixed_seq = fixed(i.shape[1]) or fixed_seq
            fixed_rows = fixed(i.shape[0]) or fixed_rows
        has_mask = has_mask or role == "mask"
        inputs.append((i.name, role, i.type))
    if fixed_seq and fixed_seq < window and mode != "long":
        if args.window:
            raise BadInput(f"window {window} is longer than the {fixed_seq} tokens the inputs of {args.model} declare")
        window = fixed_seq
    batch = fixed_rows or args.batch

    # The output pooled: the first rank-3 floating-point one (the last
    # hidden state), never pooler_output.
    output, dim = None, 0
    for o in sess.get_outputs():
        if len(o.shape) == 3 and o.type in ("tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)"):
            output, dim = o.name, fixed(o.shape[2])
            break
    if output is None:
        raise BadInput(f"{args.model} has no rank-3 float output (outputs {', '.join(o.name for o in sess.get_outputs())})")
    s = dict(model=args.model, vocab=args.vocab, mode=mode, pooling=pooling, normalise=not args.raw,
             max_tokens=args.max_tokens, window=window, overlap=args.chunk_overlap, batch=batch,
             limit=limit, long_model=long_model, fixed_seq=fixed_seq, fixed_rows=fixed_rows,
             has_mask=has_mask, inputs=inputs, output=output, dim=dim, threads=args.threads,
             dump_tokens=bool(args.dump_tokens))
    if dim == 0:  # not declared: run [CLS] [SEP] once to see it
        probe = DocEmbedder(s, sess)
        s["dim"] = len(probe.run_rows([[probe.cls, probe.sep]])[0])
    return s


# ---------------------------------------------------------------------------
# Embedding: documents -> passes -> batched runs -> pooled vectors, as
# embed.Embedder does.

def bucket(seq):
    """Padded length of a run: a multiple of 64 up to 512 tokens, of 512
    beyond (padding is masked; few shapes keep onnxruntime's arena small)."""
    return (seq + 63) // 64 * 64 if seq <= 512 else (seq + 511) // 512 * 512


def normalise(v):
    n = np.sqrt(np.dot(v, v))
    return v / n if n > 0 else v


class DocEmbedder:
    """Turns texts into vectors with one onnxruntime session. Used by the
    Ray actors (EmbedDocs) and, for the dimension probe, by resolve."""

    def __init__(self, s, sess=None):
        self.s = s
        self.tok, self.cls, self.sep, self.pad = load_tokenizer(s["model"], s["vocab"])
        self.sess = sess or open_session(s["model"], s["threads"])

    def keep(self):
        """Wordpieces of a text read: --max-tokens, and in truncate mode at
        most a window's."""
        n, w = self.s["max_tokens"], self.s["window"]
        if self.s["mode"] == "truncate" and (n == 0 or n > w - 2):
            n = w - 2
        return n

    def long_limit(self):
        lim, fs = self.s["limit"], self.s["fixed_seq"]
        if lim and fs:
            return min(lim, fs)
        return fs or lim

    def frame(self, body):
        return [self.cls] + list(body) + [self.sep]

    def passes(self, doc_id, toks):
        """The rows one text is read as (each [CLS] ... [SEP])."""
        mode, w = self.s["mode"], self.s["window"]
        if mode == "truncate":
            return [self.frame(toks[:w - 2])]
        if mode in ("chunk", "chunks"):
            n = w - 2
            stride = n - self.s["overlap"]
            out, lo = [], 0
            while True:
                hi = min(lo + n, len(toks))
                out.append(self.frame(toks[lo:hi]))
                if hi == len(toks):
                    return out
                lo += stride
        # long: one pass; a `convert long` model reads it framed per window.
        if self.s["long_model"]:
            rows = []
            for lo in range(0, max(len(toks), 1), w - 2):
                rows += self.frame(toks[lo:lo + w - 2])
        else:
            rows = self.frame(toks)
        lim = self.long_limit()
        if lim and len(rows) > lim:
            raise BadInput(f"document {doc_id} has {len(toks)} wordpieces ({len(rows)} tokens with [CLS] and [SEP]), "
                           f"but model {self.s['model']} admits {lim} tokens per pass; cap the text with --max-tokens, or use --mode chunk")
        return [rows]

    def run_rows(self, rows):
        """Runs rows of token ids as one batch, padded, and pools each row
        (float64)."""
        s = self.s
        n = len(rows)
        b = max(n, s["fixed_rows"])
        seq = max(len(r) for r in rows)
        if s["has_mask"]:
            lim = self.long_limit()
            seq = max(seq, min(bucket(seq), lim)) if lim else bucket(seq)
        if s["fixed_seq"]:
            if seq > s["fixed_seq"]:
                raise BadInput(f"{s['model']} takes sequences of {s['fixed_seq']} tokens, got {seq}")
            seq = s["fixed_seq"]
        ids = np.full((b, seq), self.pad, dtype=np.int64)
        mask = np.zeros((b, seq), dtype=np.int64)
        lengths = []
        for i in range(b):
            r = rows[i] if i < n else [self.cls, self.sep]  # rows filling a declared batch
            ids[i, :len(r)] = r
            mask[i, :len(r)] = 1
            lengths.append(len(r))
        feed = {}
        for name, role, typ in s["inputs"]:
            v = {"ids": ids, "mask": mask, "type": np.zeros_like(ids),
                 "position": np.broadcast_to(np.arange(seq, dtype=np.int64), (b, seq)).copy()}[role]
            feed[name] = v.astype({"tensor(int32)": np.int32, "tensor(float)": np.float32}.get(typ, np.int64))
        (hidden,) = self.sess.run([s["output"]], feed)
        hidden = hidden.astype(np.float64)
        out = []
        for i in range(n):
            h = hidden[i, :lengths[i]]
            if s["pooling"] == "cls":
                out.append(h[0].copy())
            elif s["pooling"] == "max":
                out.append(h.max(axis=0))
            else:
                out.append(h.mean(axis=0))
        return out

    def tokenize(self, texts):
        """The wordpiece ids read of each text (its first keep())."""
        keep = self.keep()
        encs = self.tok.encode_batch(texts, add_special_tokens=False)
        return [e.ids[:keep] if keep > 0 else e.ids for e in encs]

    def embed(self, doc_ids, toks):
        """Vectors of the tokenized texts: a float32 [k, dim] array each
        (k = 1, or the chunks in chunks mode)."""
        s = self.s
        plan = []  # (text index, row)
        for i, t in enumerate(toks):
            plan += [(i, r) for r in self.passes(doc_ids[i], t)]
        step = 1 if s["mode"] == "long" else max(1, min(s["batch"], MAX_BATCH_TOKENS // s["window"]))
        pooled = []
        for lo in range(0, len(plan), step):
            pooled += self.run_rows([r for _, r in plan[lo:lo + step]])
        sums, weights, chunks = [None] * len(toks), [0.0] * len(toks), [[] for _ in toks]
        for (i, row), v in zip(plan, pooled):
            if s["mode"] == "chunks":
                chunks[i].append(normalise(v) if s["normalise"] else v)
                continue
            w = 1.0
            if s["mode"] == "chunk":
                # Each chunk's unit vector counts by its wordpieces: a short
                # tail weighs what it holds.
                w = float(max(1, len(row) - 2))
                v = normalise(v) * w
            sums[i] = v if sums[i] is None else sums[i] + v
            weights[i] += w
        out = []
        for i in range(len(toks)):
            if s["mode"] == "chunks":
                vecs = np.stack(chunks[i])
            else:
                v = sums[i] / weights[i] if weights[i] != 1 else sums[i]
                vecs = (normalise(v) if s["normalise"] else v)[None, :]
            vecs = vecs.astype(np.float32)
            if not np.isfinite(vecs).all():
                raise RuntimeError(f"document {doc_ids[i]}: its vector is not finite (the model's output is not finite)")
            out.append(vecs)
        return out


class EmbedDocs:
    """The Ray Data UDF: an actor holds one DocEmbedder (the session is
    loaded once per actor) and embeds each batch of documents it is given.

    In: id, text, bad (why a document cannot be embedded, or ""), mine
    (whether it belongs to this run's shard). Out: id, mine, bad, n (its
    vectors), vectors (float32 [n, dim] as bytes), and tokens (int64 ids
    read, as bytes) when --dump-tokens asks for them."""

    def __init__(self, settings):
        self.e = DocEmbedder(settings)

    def __call__(self, batch):
        ids = [str(x) for x in batch["id"]]
        mine = np.asarray(batch["mine"], dtype=bool)
        bad = [str(x) for x in batch["bad"]]
        todo = [i for i in range(len(ids)) if mine[i] and not bad[i]]
        toks = dict(zip(todo, self.e.tokenize([str(batch["text"][i]) for i in todo]))) if todo else {}
        for i in todo:
            if not toks[i]:
                # Its vector would be that of [CLS] [SEP], and rank like any
                # other.
                bad[i] = "empty: no wordpieces (blank, or only characters the tokenizer drops)"
        todo = [i for i in todo if not bad[i]]
        vecs = self.e.embed([ids[i] for i in todo], [toks[i] for i in todo]) if todo else []
        n, blob, tblob = [0] * len(ids), [b""] * len(ids), [b""] * len(ids)
        for i, v in zip(todo, vecs):
            n[i], blob[i] = len(v), v.tobytes()
            if self.e.s["dump_tokens"]:
                tblob[i] = np.asarray(toks[i], dtype=np.int64).tobytes()
        out = {"id": np.array(ids, dtype=object), "mine": mine, "bad": np.array(bad, dtype=object),
               "n": np.array(n, dtype=np.int64), "vectors": np.array(blob, dtype=object)}
        if self.e.s["dump_tokens"]:
            out["tokens"] = np.array(tblob, dtype=object)
        return out


# ---------------------------------------------------------------------------
# Reading the corpus: the file is cut into byte ranges that end at line
# ends, and each range is read and parsed by a Ray task; with
# preserve_order the documents reach the writer in input order.

def byte_ranges(path, block):
    """[start, end) byte ranges of about `block` bytes, each ending after a
    newline (or at the end of the file)."""
    size = os.path.getsize(path)
    starts = [0]
    with open(path, "rb") as f:
        pos = block
        while pos < size:
            f.seek(pos)
            f.readline()  # to the start of the next line
            if f.tell() >= size:
                break
            starts.append(f.tell())
            pos = f.tell() + block
    return [{"start": a, "end": b} for a, b in zip(starts, starts[1:] + [size])]


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for c in data:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def shard_of(doc_id, n):
    """The shard, of n, of a document: FNV-1a (64 bits) of its id's bytes,
    mod n [embed.ShardOf]."""
    return fnv1a64(doc_id.encode("utf-8")) % n


# White space as Go's strings.TrimSpace sees it: a line of only these is
# blank, skipped and not counted.
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
SURROGATE = re.compile("[\ud800-\udfff]")


class JSONNumber(str):
    """A JSON number as written: an id 1.50 is "1.50", as in Go."""


def no_constants(name):
    raise ValueError(f"{name} is not JSON")


def parse_line(raw, where):
    """One JSONL line (bytes, no newline) -> (id, text, bad); None for a
    blank line [cmd/convert jsonlSource]."""
    line = raw.decode("utf-8", "replace")
    if not line.strip(GO_SPACE):
        return None
    bad = ""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = f"invalid UTF-8: byte {e.start} of the line is not UTF-8 (convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8)"
    try:
        pairs = json.loads(line, parse_int=JSONNumber, parse_float=JSONNumber, parse_constant=no_constants,
                           object_pairs_hook=lambda p: p)
    except ValueError as e:
        raise BadInput(f"{where}: {e} (want one JSON object {{\"id\": ..., \"text\": ...}} per line)") from None
    if not isinstance(pairs, list):
        raise BadInput(f"{where}: want one JSON object {{\"id\": ..., \"text\": ...}} on the line")
    # Go's encoding/json matches keys case-insensitively, the last one
    # winning.
    doc_id = text = None
    for k, v in pairs:
        if k.casefold() == "id":
            doc_id = v
        elif k.casefold() == "text":
            text = v
    if not isinstance(doc_id, str):
        raise BadInput(f"{where}: no \"id\" (a string or a number)")
    doc_id = str(doc_id)
    if doc_id == "" or "\r" in doc_id or "\n" in doc_id:
        raise BadInput(f"{where}: id {doc_id!r} is empty or has a line break (ids are written one per line)")
    if not isinstance(text, str) or isinstance(text, JSONNumber):
        raise BadInput(f"{where}: no \"text\" string")
    if not bad and has_surrogate(pairs):
        # An escaped lone surrogate ("\ud800" without its pair) is half
        # of a UTF-16 pair, no character: convert refuses the document as
        # it refuses bytes that are not UTF-8.
        bad = "invalid UTF-8: the line escapes a lone surrogate (half of a UTF-16 pair, no character; fix the exporter that wrote it)"
    # A bad document is not embedded: its id still names it (and must be
    # written as UTF-8), its text is dropped.
    return SURROGATE.sub("\ufffd", doc_id), "" if bad else text, bad


def has_surrogate(v):
    """Whether a parsed JSON value holds a lone surrogate in any string,
    key or value (json decodes an escaped pair to one character and leaves
    a lone one as it is)."""
    if isinstance(v, str):
        return SURROGATE.search(v) is not None
    if isinstance(v, list):
        return any(has_surrogate(x) for x in v)
    if isinstance(v, tuple):  # a (key, value) pair
        return has_surrogate(v[0]) or has_surrogate(v[1])
    return False


def read_ranges(batch, path, shard, rows):
    """Ray Data UDF: reads byte ranges of the JSONL file, parses their
    lines and yields them `rows` documents at a time (each yield a block of
    its own, so that the documents of one range spread over the actors). A
    document of another shard keeps its id (the writer checks every id once
    and counts every record) but not its text."""
    si, sn = shard or (0, 0)
    cols = {"id": [], "text": [], "bad": [], "mine": []}

    def block():
        out = {"id": np.array(cols["id"], dtype=object), "text": np.array(cols["text"], dtype=object),
               "bad": np.array(cols["bad"], dtype=object), "mine": np.array(cols["mine"], dtype=bool)}
        for c in cols.values():
            c.clear()
        return out

    with open(path, "rb") as f:
        for start, end in zip(batch["start"], batch["end"]):
            f.seek(int(start))
            data = f.read(int(end) - int(start))
            pos = int(start)
            for raw in data.split(b"\n"):
                where = f"{path}, byte {pos}"
                pos += len(raw) + 1
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                doc = parse_line(raw, where)
                if doc is None:
                    continue
                doc_id, text, bad = doc
                mine = sn == 0 or shard_of(doc_id, sn) == si
                cols["id"].append(doc_id)
                cols["text"].append(text if mine else "")
                cols["bad"].append(bad)
                cols["mine"].append(mine)
                if len(cols["id"]) == rows:
                    yield block()
    if cols["id"]:
        yield block()


# ---------------------------------------------------------------------------
# Writing the folder of parts [embed.PartWriter].

def npy_header(rows, dim):
    """The header `convert` writes for a float32 [rows, dim] .npy file
    (format 1.0, padded to 64 bytes). embed-merge compares it byte for byte
    (numpy's own header leaves room to grow the shape, so differs)."""
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, dim)
    pad = 64 - (10 + len(h) + 1) % 64
    h += " " * (0 if pad == 64 else pad) + "\n"
    return b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode("latin-1")


def write_atomic(path, data):
    tmp = path + ".tmp-embed-ray"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def sync_dir(folder):
    """Makes the renames in folder durable (before a later write that
    stands on them)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def go_json(v):
    """v as Go's json.MarshalIndent(v, "", "  ") writes it, and a newline:
    json.dumps, with the characters Go escapes in strings (<, >, & and
    the line and paragraph separators) escaped as Go does, so that the
    manifest is byte for byte convert's [embed.PartWriter]."""
    s = json.dumps(v, indent=2, ensure_ascii=False)
    for c, e in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(c, e)
    return (s + "\n").encode("utf-8")


RECORD = re.compile(r"part-(\d{5,10})\.json")  # a part's record [embed recordIndex]


def remove_records(folder):
    """Removes the part records (part-00000.json, ...) in folder."""
    for name in os.listdir(folder):
        m = RECORD.fullmatch(name)
        if m and name == "part-%05d.json" % int(m.group(1)):
            try:
                os.remove(os.path.join(folder, name))
            except FileNotFoundError:
                pass


class PartWriter:
    """Parts of part_size documents each, committed as they fill, as
    convert's are [embed.PartWriter]: the part's two files, then (for the
    first part) manifest.json with the head and no parts, then the part's
    record part-NNNNN.json (its entry in the manifest), whose atomic
    write commits the part. A commit writes the same few files whatever
    the number of parts before it. At the end, the last part's files,
    then manifest.json listing every part, marked complete, then the
    records are removed. A folder this leaves half done (manifest.json
    and the records of the whole parts) reads as convert's does: its
    manifest lists the committed parts, and `convert embed` resumes it."""

    def __init__(self, folder, head):
        self.dir = folder
        # The fields of convert's manifest, in its order.
        self.m = {"format": PARTS_FORMAT, **head, "parts": [], "documents": 0, "vectors": 0,
                  "skipped_bad": 0, "input_records": 0, "complete": False}
        self.headed = False
        self.ids, self.vecs, self.first, self.last, self.records, self.skipped, self.docs = [], [], "", "", 0, 0, 0
        # Records without a manifest belong to no run.
        remove_records(folder)

    def skip(self):
        self.skipped += 1

    def add(self, record, doc_id, vec_ids, vecs):
        if self.docs == 0:
            self.first = doc_id
        self.ids += vec_ids
        self.vecs.append(vecs)
        self.docs += 1
        self.last, self.records = doc_id, record
        if self.docs >= self.m["settings"]["part_size"]:
            self.flush(False)

    def flush(self, complete):
        m = self.m
        part = None
        if self.docs > 0:
            name = "part-%05d" % len(m["parts"])
            data = np.concatenate(self.vecs).astype("<f4")
            npy = npy_header(data.shape[0], data.shape[1]) + data.tobytes()
            ids = "".join(i + "\n" for i in self.ids).encode("utf-8")
            write_atomic(os.path.join(self.dir, name + ".npy"), npy)
            write_atomic(os.path.join(self.dir, name + ".ids.txt"), ids)
            part = {"name": name, "first_id": self.first, "last_id": self.last, "documents": self.docs,
                    "vectors": data.shape[0], "input_records": self.records, "skipped_bad": self.skipped,
                    "sha256": hashlib.sha256(npy).hexdigest(), "ids_sha256": hashlib.sha256(ids).hexdigest()}
            sync_dir(self.dir)
        elif not complete:
            return
        if not complete and not self.headed:
            write_atomic(os.path.join(self.dir, MANIFEST), go_json(m))  # the head: no parts yet
            sync_dir(self.dir)
            self.headed = True
        if not complete:
            write_atomic(os.path.join(self.dir, part["name"] + ".json"), go_json(part))  # the commit
        if part is not None:
            m["parts"].append(part)
            m["documents"] += part["documents"]
            m["vectors"] += part["vectors"]
            m["skipped_bad"] += part["skipped_bad"]
            m["input_records"] = part["input_records"]
        elif complete:
            m["skipped_bad"] += self.skipped
        if complete:
            m["complete"] = True
            write_atomic(os.path.join(self.dir, MANIFEST), go_json(m))
            sync_dir(self.dir)
            remove_records(self.dir)
        self.ids, self.vecs, self.first, self.last, self.skipped, self.docs = [], [], "", "", 0, 0


# ---------------------------------------------------------------------------
# The command line.

class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 1, as convert's do
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"embed_ray: {message}\n")


def parse_args(argv):
    p = Parser(prog="embed_ray.py", description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="the ONNX model (its tokenizer files beside it, as convert writes them)")
    p.add_argument("--jsonl", required=True, metavar="FILE", help='JSON lines {"id": ..., "text": ...} (a file every worker can read)')
    p.add_argument("-o", dest="out", required=True, metavar="DIR/", help="the folder of parts to write (new, or empty)")
    g = p.add_argument_group("settings, as convert embed's (see convert embed --help)")
    g.add_argument("--mode", default="auto", choices=["auto", "truncate", "chunk", "chunks", "long"])
    g.add_argument("--pooling", default="auto", choices=["auto", "mean", "cls", "max"])
    g.add_argument("--raw", action="store_true", help="do not L2-normalise the vectors")
    g.add_argument("--max-tokens", type=int, default=0, metavar="N", help="read at most N wordpieces of each text (0: all)")
    g.add_argument("--window", type=int, default=0, metavar="W",
                   help="tokens per pass, [CLS] and [SEP] included (default: the model's, as convert works it out)")
    g.add_argument("--chunk-overlap", type=int, default=0, metavar="K")
    g.add_argument("--batch", type=int, default=DEFAULT_BATCH, metavar="B",
                   help="texts or chunks per onnxruntime run (default %(default)s)")
    g.add_argument("--part-size", type=int, default=1000, metavar="N", help="documents per part (default %(default)s)")
    g.add_argument("--shard", default="", metavar="I/N",
                   help="embed only the documents whose id hashes to I mod N (FNV-1a, as convert)")
    g.add_argument("--skip-bad-docs", action="store_true")
    g.add_argument("--vocab", default="", metavar="PATH",
                   help="tokenizer: a folder, tokenizer.json or vocab.txt (default: beside the model)")
    r = p.add_argument_group("Ray")
    r.add_argument("--address", default="", help="a Ray cluster to join (default: start one on this machine)")
    r.add_argument("--num-cpus", type=int, default=0, metavar="N", help="CPUs of the local Ray instance (default: all)")
    r.add_argument("--actors", type=int, default=0, metavar="N",
                   help="embedding actors, one session each (default: CPUs / --threads)")
    r.add_argument("--threads", type=int, default=1, metavar="T",
                   help="onnxruntime intra-op threads, and CPUs, per actor (default %(default)s)")
    r.add_argument("--docs-per-call", type=int, default=64, metavar="N",
                   help="documents handed to an actor at a time (default %(default)s)")
    r.add_argument("--read-bytes", type=int, default=16 << 20, metavar="N",
                   help="bytes of the JSONL file per read task (default 16 MiB)")
    r.add_argument("--object-store-mb", type=int, default=0, metavar="MB",
                   help="object store of the local Ray instance (default: Ray's)")
    p.add_argument("--dump-tokens", default="", metavar="FILE",
                   help='also write {"id", "tokens"} per document: the wordpiece ids read (a tokenizer parity check)')
    a = p.parse_args(argv)
    if a.mode != "chunk" and a.mode != "chunks" and a.chunk_overlap:
        p.error("--chunk-overlap needs --mode chunk or chunks")
    for name in ("max_tokens", "chunk_overlap"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be non-negative")
    if a.window and a.window < 3:
        p.error(f"--window {a.window}: want at least 3 ([CLS], a wordpiece, [SEP])")
    if a.batch < 1 or a.part_size < 1 or a.threads < 1 or a.docs_per_call < 1 or a.read_bytes < 1:
        p.error("--batch, --part-size, --threads, --docs-per-call and --read-bytes must be at least 1")
    a.shard_pair = None
    if a.shard:
        m = re.fullmatch(r"(\d+)/(\d+)", a.shard)
        if not m or not 0 <= int(m.group(1)) < int(m.group(2)) <= 65536:
            p.error(f"--shard {a.shard!r}: want i/n with 0 <= i < n <= 65536")
        a.shard_pair = (int(m.group(1)), int(m.group(2)))
    return a


def run(a):
    import onnxruntime
    import ray

    for f, what in ((a.model, "MODEL"), (a.jsonl, "--jsonl")):
        if not os.path.isfile(f):
            raise BadInput(f"{what} {f}: no such file")
    out = a.out.rstrip("/") or a.out
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise BadInput(f"-o {a.out}: the folder {os.path.dirname(out)} does not exist")
    if os.path.exists(os.path.join(out, MANIFEST)):
        raise BadInput(f"-o {a.out} already holds parts (this recipe does not resume: use a new folder)")
    os.makedirs(out, exist_ok=True)

    s = resolve(a)
    head = {
        "tool": f"recipes/ray/embed_ray.py (ray {ray.__version__}, onnxruntime {onnxruntime.__version__})",
        "model": {"file": os.path.basename(a.model), "sha256": file_sha256(a.model)},
        "tokenizer": tokenizer_files(a.model, a.vocab),
        # The settings `convert embed` writes; embed-merge compares them.
        "settings": {"input": "--jsonl " + a.jsonl, "mode": s["mode"], "pooling": s["pooling"],
                     "normalised": s["normalise"], "max_tokens": s["max_tokens"], "window": s["window"],
                     "overlap": s["overlap"], "output": s["output"], "dim": s["dim"],
                     # onnxruntime: the engine of convert's default backend.
                     "backend": "ort", "skip_bad_docs": a.skip_bad_docs, "part_size": a.part_size,
                     "part_format": "npy"},
    }
    if a.shard:
        head["settings"]["shard"] = a.shard
    log(f"{a.model}: mode {s['mode']}, pooling {s['pooling']}, window {s['window']}, dim {s['dim']}"
        + (f", max tokens {s['max_tokens']}" if s["max_tokens"] else "") + (f", shard {a.shard}" if a.shard else ""))

    if a.address:
        ray.init(address=a.address, log_to_driver=True)
    else:
        ray.init(num_cpus=a.num_cpus or None, include_dashboard=False, logging_level=logging.WARNING,
                 object_store_memory=(a.object_store_mb << 20) or None)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    actors = a.actors or max(1, cpus // a.threads)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # documents in input order
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    # Ray Data warns that a small input feeds fewer actors than the pool.
    warnings.filterwarnings("ignore", message="The minimum number of concurrent actors")

    ds = build_dataset(ray, a, s, actors)
    start = time.time()
    embedded, vectors, skipped = write_parts(ds, a, s, head, out)
    took = time.time() - start
    extra = (f", skipped {skipped} bad" if skipped else "") + (f", shard {a.shard}" if a.shard else "") + \
        (f", {vectors} vectors" if vectors != embedded else "")
    print(f"embedded {embedded} documents{extra} (mode {s['mode']}, pooling {s['pooling']}, window {s['window']}, "
          f"dim {s['dim']}) in {took:.2f} s on {actors} actors → {out}")


def build_dataset(ray, a, s, actors):
    """The pipeline: byte ranges of the JSONL file -> documents (tasks) ->
    vectors (an actor pool, one onnxruntime session per actor)."""
    # Ranges of at most --read-bytes, and at least four per actor when the
    # file is small, so that reading and embedding start on every actor.
    size = os.path.getsize(a.jsonl)
    block = min(a.read_bytes, max(4096, -(-size // (4 * actors))))
    ds = ray.data.from_items(byte_ranges(a.jsonl, block))
    # Reading holds no CPU slot: it is light beside the model, and the
    # actors hold every slot for the whole run.
    ds = ds.map_batches(read_ranges, batch_size=1, num_cpus=0, batch_format="numpy",
                        fn_kwargs={"path": a.jsonl, "shard": a.shard_pair, "rows": a.docs_per_call})
    return ds.map_batches(EmbedDocs, batch_size=a.docs_per_call, batch_format="numpy",
                          compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=a.threads,
                          fn_constructor_kwargs={"settings": s})


def write_parts(ds, a, s, head, out):
    """Consumes the pipeline's rows in input order (every record, of every
    shard) and writes the folder of parts: checks each id once, counts the
    records, skips or refuses bad documents as convert does. Returns the
    documents embedded, their vectors, and the bad documents skipped."""
    w = PartWriter(out, head)
    seen, records, embedded, vectors, skipped = set(), 0, 0, 0, 0
    dump = open(a.dump_tokens, "w", encoding="utf-8") if a.dump_tokens else None
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for i in range(len(batch["id"])):
            doc_id = str(batch["id"][i])
            records += 1
            key = hashlib.sha256(doc_id.encode("utf-8")).digest()[:16]
            if key in seen:
                raise BadInput(f"{a.jsonl}: id {doc_id!r} of record {records} was already used")
            seen.add(key)
            if not batch["mine"][i]:
                continue
            if batch["bad"][i]:
                if not a.skip_bad_docs:
                    raise BadInput(f"document {doc_id} cannot be embedded (--skip-bad-docs skips it): {batch['bad'][i]}")
                log(f"skipped document {doc_id}: {batch['bad'][i]}")
                w.skip()
                skipped += 1
                continue
            n = int(batch["n"][i])
            vecs = np.frombuffer(batch["vectors"][i], dtype=np.float32).reshape(n, s["dim"])
            ids = [doc_id] if s["mode"] != "chunks" else [f"{doc_id}#{k}" for k in range(n)]
            w.add(records, doc_id, ids, vecs)
            embedded += 1
            vectors += n
            if dump:
                toks = np.frombuffer(batch["tokens"][i], dtype=np.int64).tolist()
                dump.write(json.dumps({"id": doc_id, "tokens": toks}) + "\n")
    if dump:
        dump.close()
    if records == 0:
        raise BadInput(f"--jsonl {a.jsonl}: no documents")
    if embedded == 0 and skipped > 0:
        raise BadInput(f"all {skipped} documents are bad; nothing to embed")
    w.flush(True)
    return embedded, vectors, skipped


def cause(e):
    """The BadInput behind an exception Ray wraps, or None."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        # Ray hands back a worker's exception wrapped (RayTaskError), the
        # original in .cause.
        if isinstance(getattr(e, "cause", None), BaseException):
            e = e.cause
            continue
        if any(c.__name__ == "BadInput" for c in type(e).__mro__):
            return e
        e = e.__cause__ or e.__context__
    return None


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(a)
    except Exception as e:  # noqa: BLE001 - every failure gets an exit code
        c = cause(e)
        # A BadInput's message is one line (Ray appends its retry advice
        # below it); of anything else, the last line says what failed.
        lines = str(c if c is not None else e).strip().splitlines() or [type(e).__name__]
        print("embed_ray: " + (lines[0] if c is not None else lines[-1]), file=sys.stderr)
        return EXIT_BAD_INPUT if c is not None else EXIT_RUNTIME
    return 0


if __name__ == "__main__":
    sys.exit(main())
