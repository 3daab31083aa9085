#!/usr/bin/env bash
# embed-memory.sh measures how `convert embed`'s memory grows with the
# corpus (docs/performance.md, "Memory does not grow with the corpus"):
# it builds a JSONL corpus of SIZE_MB (default 2048) of documents of about
# 2,000 characters (300 words from a seeded place in
# testdata/real/longdocs/tune, cut at a space; quotes, backslashes and
# control characters left out, so that no JSON escape is needed), embeds it into a folder
# of parts in truncate mode with the tiny test model (testdata/bert-tiny.onnx
# and a vocabulary of the pages' 995 most frequent words: the model's
# cost is not what is measured, and a real one would take days), and
# prints the process's resident memory every 15 s against the parts
# written, then the peak (--stats) and embed-merge's check of the folder.
#
#   scripts/embed-memory.sh            SIZE_MB=200 scripts/embed-memory.sh
#
# Work files (the corpus, the vectors) go to out/embed-memory/; about
# 2.5 GB of disk at the default size. Linux only (/proc for the samples).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
SIZE_MB=${SIZE_MB:-2048}
src=testdata/real/longdocs/tune
out=out/embed-memory
if [ ! -d "$src" ]; then
  echo "embed-memory: needs $src (run scripts/setup.sh)" >&2
  exit 2
fi
go build -o bin/convert ./cmd/convert
mkdir -p "$out/model"
cp testdata/bert-tiny.onnx "$out/model/"
# The vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK] and the 995 most
# frequent lowercase words (bert-tiny has 1,000 rows); other words are
# [UNK] or split into these.
{
  printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n'
  cat "$src"/*.txt | tr 'A-Z' 'a-z' | tr -cs 'a-z' '\n' | grep -v '^$' |
    sort | uniq -c | sort -k1,1nr -k2,2 | awk 'NR <= 995 { print $2 }'
} >"$out/model/vocab.txt"
corpus="$out/corpus-$SIZE_MB.jsonl"
if [ ! -f "$corpus" ]; then
  cat "$src"/*.txt | awk -v size="$SIZE_MB" '
    { for (i = 1; i <= NF; i++) { w = $i; gsub(/[\001-\037"\\]/, "", w); if (w != "") words[n++] = w } }
    END {
      srand(1)
      limit = size * 1048576
      for (d = 0; total < limit; d++) {
        at = int(rand() * (n - 400))
        text = words[at]
        for (k = 1; k < 300; k++) {
          if (length(text) + 1 + length(words[at + k]) > 2000) break
          text = text " " words[at + k]
        }
        line = sprintf("{\"id\": \"d%07d\", \"text\": \"%s\"}", d, text)
        print line
        total += length(line) + 1
      }
    }' >"$corpus.tmp"
  mv "$corpus.tmp" "$corpus"
fi
echo "corpus: $corpus, $(wc -l <"$corpus") documents, $(du -m "$corpus" | cut -f1) MiB"
rm -rf "$out/vectors"
bin/convert embed "$out/model/bert-tiny.onnx" --jsonl "$corpus" --mode truncate --threads 2 \
  -o "$out/vectors/" --stats >"$out/embed.log" 2>"$out/embed.err" &
pid=$!
echo "| seconds | parts written | resident memory |"
echo "|---|---|---|"
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS/ { printf "%.0f MiB", $2 / 1024 }' "/proc/$pid/status" 2>/dev/null || true)
  parts=$( (find "$out/vectors" -maxdepth 1 -name 'part-*.npy' 2>/dev/null || true) | wc -l)
  [ -n "$rss" ] && echo "| $(($(date +%s) - start)) | $parts | $rss |"
  sleep 15
done
wait "$pid" || {
  echo "embed-memory: embed failed (see $out/embed.err)" >&2
  exit 1
}
tail -n 1 "$out/embed.log"
grep 'peak RSS' "$out/embed.err"
bin/convert embed-merge "$out/vectors/"
