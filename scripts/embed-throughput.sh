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
# of embedding. Each figure is the median of REPEAT runs (default 3);
# peak RSS is each process's largest (--stats). Run it alone: nothing
# else may compute meanwhile. Work files go to out/embed-throughput/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
DOCS=${DOCS:-16}
REPEAT=${REPEAT:-3}
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

# median: the middle of its arguments (sorted numerically).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
maxof() { printf '%s\n' "$@" | sort -g | tail -n 1; }

echo "| tokens | mode | processes × threads | documents/s | wordpieces/s | peak RSS |"
echo "|---|---|---|---|---|---|"
for tokens in 512 4096; do
  wp=510
  [ "$tokens" = 4096 ] && wp=4080
  for mode in truncate chunk long; do
    m=$model
    [ "$mode" = long ] && m=$long
    ds=() ws=() rs=()
    for ((k = 0; k < REPEAT; k++)); do
      embed one "$m" "$mode" "$wp" 2
      read -r d w s r <<<"$(field "$out/one.log")"
      ds+=("$(awk -v d="$d" -v s="$s" 'BEGIN { print d/s }')")
      ws+=("$(awk -v w="$w" -v s="$s" 'BEGIN { print w/s }')")
      rs+=("$r")
    done
    awk -v t="$tokens" -v mode="$mode" -v d="$(median "${ds[@]}")" -v w="$(median "${ws[@]}")" -v r="$(maxof "${rs[@]}")" \
      'BEGIN { printf "| %s | %s | 1 × 2 | %.2f | %.0f | %s MiB |\n", t, mode, d, w, r }'
    ds=() ws=() ra=() rb=()
    for ((k = 0; k < REPEAT; k++)); do
      embed a "$m" "$mode" "$wp" 1 0/2 &
      pa=$!
      embed b "$m" "$mode" "$wp" 1 1/2
      wait "$pa"
      read -r d1 w1 s1 r1 <<<"$(field "$out/a.log")"
      read -r d2 w2 s2 r2 <<<"$(field "$out/b.log")"
      # Both shards count from their common start to the slower's end.
      ds+=("$(awk -v d="$((d1 + d2))" -v s1="$s1" -v s2="$s2" 'BEGIN { print d/(s1 > s2 ? s1 : s2) }')")
      ws+=("$(awk -v w="$((w1 + w2))" -v s1="$s1" -v s2="$s2" 'BEGIN { print w/(s1 > s2 ? s1 : s2) }')")
      ra+=("$r1") rb+=("$r2")
    done
    awk -v t="$tokens" -v mode="$mode" -v d="$(median "${ds[@]}")" -v w="$(median "${ws[@]}")" -v r1="$(maxof "${ra[@]}")" -v r2="$(maxof "${rb[@]}")" \
      'BEGIN { printf "| %s | %s | 2 × 1 | %.2f | %.0f | %s + %s MiB |\n", t, mode, d, w, r1, r2 }'
  done
done
