#!/usr/bin/env python3
"""Generate tokenizer_cases.json: reference WordPiece ids for the Go tokenizer test.

The reference is Hugging Face `tokenizers` (the Rust "fast" tokenizer) loaded
from the real model's tokenizer.json, with padding and truncation switched off.
Run scripts/real-model.sh first (it unpacks testdata/real/minilm), then

    python3 testdata/realmodel/tokenizer_cases.py

It creates a venv in .tools/tok-venv and pip-installs `tokenizers` there. The
Go test (tokenize/wordpiece_test.go) reads the JSON; Python is not needed to
run the tests.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VENV = os.path.join(ROOT, ".tools", "tok-venv")
TOKENIZERS = "tokenizers==0.22.1"

CASES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "Café, naïve, résumé, jalapeño, Øresund, façade.",
    "Ångström and Zürich are spelled with diacritics.",
    "ÀÉÎÕÜ àéîõü ÇçÑñ",
    "İstanbul'da ılık bir gün.",
    "ΣΊΣΥΦΟΣ and the Greek word ΟΔΥΣΣΕΥΣ.",
    "Москва — столица России.",
    "北京是中国的首都。",
    "我喜欢学习机器学习和自然语言处理",
    "東京タワーは高いです。",
    "한국어 문장도 테스트합니다.",
    "Mixed 中文 and English words together.",
    "I love pizza 🍕 and sushi 🍣!",
    "Emoji only: 😀😃😄😁",
    "Thumbs up 👍🏽 with skin tone.",
    "Family emoji 👨‍👩‍👧‍👦 joined by zero-width joiners.",
    "Numbers: 3.14159, 2,718, 1e-10, 42nd, 100%.",
    "Call +1 (555) 123-4567 or email someone@example.com.",
    "Prices: $19.99, €5, £3.50, ¥1000.",
    "Dates like 2023-11-22T03:04:05Z and 12/31/1999.",
    "Supercalifragilisticexpialidocious is a very long word.",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "antidisestablishmentarianism counterrevolutionaries",
    "a" * 99,
    "b" * 100,
    "c" * 101,
    "word " + "x" * 150 + " end",
    "MiXeD CaSe TeXt WiTh CAPITALS and lowercase.",
    "   leading and trailing whitespace   ",
    "multiple     spaces\tand\ttabs\nand\nnewlines\r\nhere",
    "non\u00a0breaking\u2003em\u2009thin spaces",
    "zero\u200bwidth\u200cjoiner\u200dchars",
    "control\x00chars\x07removed\x1fhere",
    "replacement \ufffd character",
    "soft\u00adhyphen and bidi \u202eoverride\u202c marks",
    "Quotes: “smart” ‘single’ «guillemets» „low“",
    "Dashes – en — em ‒ figure ― horizontal",
    "Ellipsis… and bullets • · ‧",
    "Brackets ([{<>}]) and symbols ^_`|~ @#&*",
    "don't won't can't it's y'all",
    "e.g. i.e. U.S.A. Ph.D. etc.",
    "C++ and C# and F# are languages; so is Go.",
    "snake_case camelCase kebab-case PascalCase",
    "https://example.com/path?query=1&x=y#frag",
    "The [MASK] is blue.",
    "[CLS] already has special [SEP] tokens [PAD]",
    "lowercase [mask] is not special",
    "Ligatures: ﬁnance ﬂow ﬀ",
    "Fullwidth ＡＢＣ１２３ and halfwidth ｶﾀｶﾅ",
    "Math: ∑ x² ≤ ∞, α+β=γ, √2 ≈ 1.414",
    "Arabic: مرحبا بالعالم",
    "Hebrew: שלום עולם",
    "Hindi: नमस्ते दुनिया",
    "Thai: สวัสดีชาวโลก",
    "Vietnamese: Tiếng Việt có dấu.",
    "The café's crème brûlée was très bon!!!",
    "",
    "   ",
    ".",
    "?!?!",
    "unaffable unhappiness reorganization",
    "Transformers are the state of the art in NLP; linear attention scales better.",
    "Performer and Linformer approximate softmax attention in linear time.",
    "ŁÓDŹ, Kraków, Gdańsk — Polish cities.",
    "Ⅻ Roman numeral and ① circled digit",
    "\U00020000\U0002a700 rare CJK extension characters",
    "Combining: e\u0301 a\u0300 o\u0308 (decomposed accents)",
]


def ensure_venv():
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    try:
        subprocess.check_call([py, "-c", "import tokenizers"], stderr=subprocess.DEVNULL)
    except subprocess.CalledProcessError:
        subprocess.check_call([py, "-m", "pip", "install", "--quiet", TOKENIZERS])
    return py


def main():
    if os.environ.get("TOKCASES_INNER") != "1":
        py = ensure_venv()
        env = dict(os.environ, TOKCASES_INNER="1")
        os.execve(py, [py, __file__], env)
    import tokenizers

    path = os.path.join(ROOT, "testdata", "real", "minilm", "tokenizer.json")
    if not os.path.exists(path):
        sys.exit("tokenizer_cases: %s missing; run scripts/real-model.sh" % path)
    tok = tokenizers.Tokenizer.from_file(path)
    tok.no_padding()
    tok.no_truncation()
    out = []
    for text in CASES:
        enc = tok.encode(text)
        out.append({"text": text, "ids": enc.ids, "tokens": enc.tokens})
    doc = {
        "reference": "tokenizers %s, tokenizer.json of sentence-transformers/all-MiniLM-L6-v2" % tokenizers.__version__,
        "cases": out,
    }
    dst = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer_cases.json")
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("tokenizer_cases: wrote %d cases to %s" % (len(out), dst))


if __name__ == "__main__":
    main()
