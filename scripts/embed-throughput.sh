#!/usr/bin/env bash
# embed-throughput.sh measures `convert embed` on this machine: documents
# and wordpieces per second, and peak memory, for truncate, chunk and
# long at 512 and 4096 tokens, in one process of 2 threads and in two
# processes of 1 thread (--shard 0/2 and 1/2, run at once), and prints one
# markdown table (docs/performance.md, "Embedding throughput").
#
#   scripts/embed-throughput.sh
#
# Model: testdata/real/minilm.onnx (all-MiniLM-L6-v2, scripts/setup.sh),
# and for long mode the model `convert long --max-length 4096` writes
# from it. Documents: the first DOCS (default 16) pages of
# testdata/real/longdocs/tune, each longer than 4096 wordpieces, read up
# to 510 wordpieces (one window of 512 tokens) or 4080 (eight windows of
# 510, 4096 tokens with each window's [CLS] and [SEP]). Truncate reads one
# window at either length. Seconds are embed's own (model loading
# excluded); two processes count from the start to the slower one's end
# of embedding. Peak RSS is each process's (--stats). Run it alone:
# nothing else may compute meanwhile. Work files go to out/embed-throughput/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
DOCS=${DOCS:-16}
model=testdata/real/minilm.onnx
src=testdata/real/longdocs/tune
out=out/embed-throughput
if [ ! -f "$model" ] || [ ! -d "$src" ]; then
  echo "embed-throughput: needs $model and $src (run scripts/setup.sh)" >&2
  exit 2
fi
go build -o bin/convert ./cmd/convert
rm -rf "$out/docs"
mkdir -p "$out/docs"
mapfile -t files < <(ls "$src"/*.txt | sort | head -n "$DOCS")
cp "${files[@]}" "$out/docs/"
long="$out/long-4096.onnx"
[ -f "$long" ] || bin/convert long "$model" -o "$long" --max-length 4096 >/dev/null

# field LOG: "documents wordpieces seconds peakMiB" from one embed log.
field() {
  local docs wp secs rss
  docs=$(sed -n 's/^embedded \([0-9]*\) documents.*/\1/p' "$1")
  wp=$(sed -n 's/^embedded .*; \([0-9]*\) wordpieces, .*/\1/p' "$1")
  secs=$(sed -n 's/^embedded .*) in \([0-9.]*\) s (.*/\1/p' "$1")
  rss=$(sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' "$1" | head -n 1)
  echo "$docs $wp $secs $rss"
}

# embed NAME MODEL MODE WORDPIECES THREADS [SHARD]: one process, its log
# in $out/NAME.log.
embed() {
  local shard=()
  [ $# -ge 6 ] && shard=(--shard "$6")
  rm -rf "$out/$1"
  bin/convert embed "$2" --docs "$out/docs" --mode "$3" --max-tokens "$4" --threads "$5" \
    "${shard[@]}" -o "$out/$1/" --stats >"$out/$1.log" 2>&1 || {
    echo "embed-throughput: $1 failed (see $out/$1.log)" >&2
    exit 1
  }
}

echo "| tokens | mode | processes × threads | documents/s | wordpieces/s | peak RSS |"
echo "|---|---|---|---|---|---|"
for tokens in 512 4096; do
  wp=510
  [ "$tokens" = 4096 ] && wp=4080
  for mode in truncate chunk long; do
    m=$model
    [ "$mode" = long ] && m=$long
    embed one "$m" "$mode" "$wp" 2
    read -r d w s r <<<"$(field "$out/one.log")"
    awk -v t="$tokens" -v mode="$mode" -v d="$d" -v w="$w" -v s="$s" -v r="$r" \
      'BEGIN { printf "| %s | %s | 1 × 2 | %.2f | %.0f | %s MiB |\n", t, mode, d/s, w/s, r }'
    embed a "$m" "$mode" "$wp" 1 0/2 &
    pa=$!
    embed b "$m" "$mode" "$wp" 1 1/2
    wait "$pa"
    read -r d1 w1 s1 r1 <<<"$(field "$out/a.log")"
    read -r d2 w2 s2 r2 <<<"$(field "$out/b.log")"
    awk -v t="$tokens" -v mode="$mode" -v d="$((d1 + d2))" -v w="$((w1 + w2))" -v s1="$s1" -v s2="$s2" -v r1="$r1" -v r2="$r2" \
      'BEGIN { s = s1 > s2 ? s1 : s2; printf "| %s | %s | 2 × 1 | %.2f | %.0f | %s + %s MiB |\n", t, mode, d/s, w/s, r1, r2 }'
  done
done
