#!/usr/bin/env python3
"""Build the byte-level BPE reference fixtures of testdata/tokenizers/.

The Go byte-level BPE tokenizer (tokenize/) is checked against Hugging Face
`tokenizers` (the Rust library behind the "fast" tokenizers). No real
model's vocabulary is committed; instead this script trains, with
`tokenizers` itself, two small byte-level BPE tokenizers (about 1500
entries, initial alphabet = the 256 ByteLevel bytes) on committed English
text -- train.txt beside this script, a frozen snapshot of
testdata/realmodel/calibration.txt and docs/*.md -- and
saves them in the two pipeline forms found in real models:

  modernbert-bpe/tokenizer.json       ModernBERT's form: no normalizer,
                                      ByteLevel(add_prefix_space=False)
                                      pre-tokenizer, TemplateProcessing
                                      "[CLS] $A [SEP]" post-processor, special
                                      tokens [UNK] [CLS] [SEP] [PAD] [MASK]
                                      ([MASK] lstrip) added after the vocab,
                                      plus two non-special added tokens
                                      "|||EMAIL_ADDRESS|||" and "    " (four
                                      spaces).
  modernbert-bpe/tokenizer_config.json  in the form found on the Hub
                                      (cls/sep/pad/mask/unk names,
                                      added_tokens_decoder, model_max_length,
                                      tokenizer_class).
  roberta-bpe/tokenizer.json          RoBERTa's form: no normalizer,
                                      ByteLevel(add_prefix_space=True),
                                      RobertaProcessing post-processor,
                                      <s> <pad> </s> <unk> <mask> at ids 0..4
                                      (<mask> lstrip).
  roberta-bpe/tokenizer_config.json   likewise.
  bpe_cases.json                      {"modernbert-bpe": [...],
                                      "roberta-bpe": [...]}, each entry
                                      {"text", "ids", "tokens", "offsets",
                                      "byte_offsets"} from
                                      Tokenizer.encode(text) with the special
                                      tokens added: hand-written edge cases,
                                      then the held-out text
                                      testdata/realmodel/heldout.txt (not seen
                                      in training). "offsets" are as the
                                      Python binding gives them, [start, end)
                                      in characters (code points);
                                      "byte_offsets" are the same spans in
                                      UTF-8 bytes of "text".

Each directory is loaded back with transformers' AutoTokenizer, which must
give the same ids on every case. Training is deterministic (RAYON_NUM_THREADS=1, a fixed input order), so a
re-run rewrites identical bytes. The Go tests read the files and need no
Python.

Usage (from the repository root):
    python3 testdata/tokenizers/gen_bpe.py
The script re-runs itself in .tools/fixture-venv (see
testdata/fixtures/fixture_venv.py), which has `tokenizers` and
`transformers`.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
from fixture_venv import ensure_venv  # noqa: E402

ensure_venv()

# The BPE trainer counts words and pairs on a rayon pool; one thread keeps
# every run identical. Must be set before tokenizers is imported.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizers  # noqa: E402
from tokenizers import (AddedToken, Tokenizer, decoders, models,  # noqa: E402
                        pre_tokenizers, processors, trainers)

VOCAB_SIZE = 1500
MAX_HELDOUT = 60

CASES = [
    # whitespace
    "",
    " ",
    "a b",
    "a  b",
    "a   b",
    "  a",
    "a  ",
    " a ",
    "a\tb",
    "\ta",
    "a\nb",
    "a\n\nb",
    "\n",
    "\r\n",
    "\t",
    "line one\r\nline two",
    "a \t\n b",
    "x \t \n  word",
    "non\u00a0breaking\u00a0space",
    "\u00a0lead",
    "em\u2003space",
    "ideographic\u3000space",
    "thin\u2009space and zero\u200bwidth",
    # contractions
    "don't",
    "I'm",
    "they're",
    "we've",
    "she'll",
    "he'd",
    "it's",
    "DON'T",
    "I'LL",
    "We'Re mixing 'S",
    "don't won't can't it's y'all",
    # apostrophes and quotes
    "'",
    "''",
    "'s'",
    "rock 'n' roll",
    "'quoted' and \"double\"",
    # digits
    "12345",
    "3.14",
    "a1b2",
    "1234567890 0987654321",
    # punctuation
    "!!!",
    "...",
    "?!",
    "--",
    "a-b",
    "Hello, world!",
    "(a) [b] {c} <d>",
    # accents and other scripts
    "café",
    "naïve",
    "Ünïcödé",
    "cafe\u0301 (decomposed)",
    "中文字符",
    "日本語のテキスト",
    "Привет мир",
    "مرحبا",
    "हिन्दी",
    # emoji and symbols
    "🤗",
    "👍🏽",
    "a🤗b",
    "€100",
    "©",
    "family 👨\u200d👩\u200d👧",
    # control characters
    "\x00",
    "\x07",
    "a\x00b\x1fc",
    # special tokens inside text (of either tokenizer)
    "a [MASK] b",
    "a[MASK]b",
    "[CLS]x[SEP]",
    "hello [MASK]",
    "[MASK]",
    "[PAD] [UNK]",
    "lowercase [mask] is not special",
    "<mask>",
    "a <mask> b",
    "a<mask>b",
    "hello <mask>",
    "x<s>y",
    "</s> <pad> <unk>",
    # non-special added tokens inside text
    "mail |||EMAIL_ADDRESS||| here",
    "mail|||EMAIL_ADDRESS|||here",
    "    ",
    "a    b",
    "a     b",
    "        ",
    "    indented code",
    "def f():\n    return 1\n",
    # long runs
    "abcdefghijklmnopqrstuvwxyz" * 11 + "abcdefghijklmn",  # 300 letters
    "=" * 200,
    # mixed case
    "MiXeD CaSe TeXt WiTh CAPITALS and lowercase",
    "HTTPServer camelCase snake_case kebab-case",
    "The quick brown fox jumps over the lazy dog.",
    # tokenize.ExampleLoad's text, so that its output is checked here.
    "Linear attention reads long documents.",
    "https://example.com/path?query=1&x=y#frag",
]


def training_lines():
    """The training text: train.txt, a frozen snapshot of committed English
    prose (testdata/realmodel/calibration.txt and docs/*.md as they were
    when the fixtures were first made), so that the fixtures do not change
    when the docs do."""
    lines = []
    with open(os.path.join(HERE, "train.txt"), encoding="utf-8") as f:
        lines.extend(f.read().splitlines())
    return lines


def trainer(special_tokens):
    return trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        show_progress=False,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )


def build_modernbert(lines):
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainer([]))
    tok.add_special_tokens([
        AddedToken("[UNK]", special=True, normalized=False),
        AddedToken("[CLS]", special=True, normalized=False),
        AddedToken("[SEP]", special=True, normalized=False),
        AddedToken("[PAD]", special=True, normalized=False),
        AddedToken("[MASK]", lstrip=True, special=True, normalized=False),
    ])
    tok.add_tokens([
        AddedToken("|||EMAIL_ADDRESS|||", special=False, normalized=True),
        AddedToken("    ", special=False, normalized=True),
    ])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    config = {
        "clean_up_tokenization_spaces": True,
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 8192,
        "pad_token": "[PAD]",
        "sep_token": "[SEP]",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "[UNK]",
    }
    return tok, config


def build_roberta(lines):
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainer([
        AddedToken("<s>", special=True, normalized=False),
        AddedToken("<pad>", special=True, normalized=False),
        AddedToken("</s>", special=True, normalized=False),
        AddedToken("<unk>", special=True, normalized=False),
        AddedToken("<mask>", lstrip=True, special=True, normalized=False),
    ]))
    ids = [tok.token_to_id(t) for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")]
    if ids != [0, 1, 2, 3, 4]:
        sys.exit("gen_bpe: roberta special token ids %s, want 0..4" % ids)
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")),  # sep
        ("<s>", tok.token_to_id("<s>")),  # cls
        trim_offsets=True,
        add_prefix_space=True,
    )
    config = {
        "add_prefix_space": True,
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": False,
        "cls_token": "<s>",
        "eos_token": "</s>",
        "errors": "replace",
        "mask_token": "<mask>",
        "model_max_length": 512,
        "pad_token": "<pad>",
        "sep_token": "</s>",
        "tokenizer_class": "RobertaTokenizer",
        "trim_offsets": True,
        "unk_token": "<unk>",
    }
    return tok, config


def write_tokenizer(tok, config, name):
    """tokenizer.json as tokenizers saves it, and a tokenizer_config.json of
    the form found beside it on the Hugging Face Hub (transformers 4.x
    save_pretrained): the special-token names, added_tokens_decoder keyed by
    id, model_max_length and tokenizer_class."""
    out = os.path.join(HERE, name)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tokenizer.json")
    tok.save(path, pretty=True)
    if Tokenizer.from_file(path).to_str() != tok.to_str():
        sys.exit("gen_bpe: %s/tokenizer.json does not round-trip" % name)
    decoder = {}
    for i, t in sorted(tok.get_added_tokens_decoder().items()):
        decoder[str(i)] = {
            "content": t.content,
            "lstrip": t.lstrip,
            "normalized": t.normalized,
            "rstrip": t.rstrip,
            "single_word": t.single_word,
            "special": t.special,
        }
    cfg = dict(config, added_tokens_decoder=decoder)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=True, indent=2, sort_keys=True)
        f.write("\n")


def check_transformers(name, texts, cases):
    """transformers' AutoTokenizer, reading both files of the directory,
    must give the ids tokenizers gave."""
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()  # no "longer than 512" warning
    hf = AutoTokenizer.from_pretrained(os.path.join(HERE, name))
    for text, case in zip(texts, cases):
        ids = hf(text, add_special_tokens=True)["input_ids"]
        if ids != case["ids"]:
            sys.exit("gen_bpe: %s: transformers gives %s for %r, tokenizers %s"
                     % (name, ids, text, case["ids"]))


def heldout_texts():
    with open(os.path.join(ROOT, "testdata", "realmodel", "heldout.txt"),
              encoding="utf-8") as f:
        raw = f.read()
    paras = []
    block = []
    for line in raw.splitlines():
        if line.strip():
            block.append(line)
        elif block:
            paras.append("\n".join(block))
            block = []
    if block:
        paras.append("\n".join(block))
    texts = list(paras)
    # heldout.txt is one sentence a line with no blank lines, so it is a
    # single paragraph; each line is a case as well.
    for p in paras:
        for line in p.split("\n"):
            if line not in texts:
                texts.append(line)
    return texts[:MAX_HELDOUT]


def byte_offsets(text, offsets):
    """The Python binding reports offsets in characters (code points); the
    Rust library works in UTF-8 bytes, as Go strings do. Every offset the
    byte-level pipeline produces falls on a character boundary, so the byte
    form is exact."""
    pos = [0]
    for ch in text:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    return [[pos[a], pos[b]] for a, b in offsets]


def encode_cases(tok, texts):
    out = []
    for text in texts:
        enc = tok.encode(text, add_special_tokens=True)
        offsets = [list(o) for o in enc.offsets]
        out.append({
            "text": text,
            "ids": enc.ids,
            "tokens": enc.tokens,
            "offsets": offsets,
            "byte_offsets": byte_offsets(text, offsets),
        })
    return out


def main():
    lines = training_lines()
    texts = CASES + heldout_texts()
    doc = {}
    for name, build in (("modernbert-bpe", build_modernbert),
                        ("roberta-bpe", build_roberta)):
        tok, config = build(lines)
        write_tokenizer(tok, config, name)
        doc[name] = encode_cases(tok, texts)
        check_transformers(name, texts, doc[name])
        print("gen_bpe: %s: %d vocab entries (with added tokens), %d cases"
              % (name, tok.get_vocab_size(with_added_tokens=True), len(texts)))
    dst = os.path.join(HERE, "bpe_cases.json")
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print("gen_bpe: wrote %s (tokenizers %s)" % (dst, tokenizers.__version__))


if __name__ == "__main__":
    main()
