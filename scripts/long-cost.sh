#!/usr/bin/env bash
# long-cost.sh measures what reading a long document costs with the real
# model (all-MiniLM-L6-v2, from scripts/real-model.sh) in each way the
# long-document issue compares: truncate to 512, chunk-and-mean (510-token
# chunks), full attention on positions extended by copying, and
# `convert long`. For each document length it embeds the same documents
# with `convert embed` in a fresh process per system and prints seconds per
# document (embed's own timing, model loading excluded) and the process's
# peak RSS (--stats), one markdown row per system and length.
#
#   scripts/long-cost.sh [LENGTH ...]      default: 4096 16384
#
# Documents: built from testdata/real/longdocs (scripts/real-text.sh),
# see below; every system reads each one's first LENGTH wordpieces. Full attention needs ~2·12·n²·4
# bytes for its score tensors (25.8 GB at 16384), more than this machine's
# 24 GB, so it is run only up to FULL_MAX tokens (default 8192) and shown
# as "not run" beyond. Run it alone: nothing else may compute meanwhile.
# Threads: THREADS (default 2). Models and documents go to out/long-cost/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(4096 16384)
DOCS=${DOCS:-8}
THREADS=${THREADS:-2}
FULL_MAX=${FULL_MAX:-8192}
model=testdata/real/minilm.onnx
src=testdata/real/longdocs
out=out/long-cost
if [ ! -f "$model" ] || [ ! -d "$src" ]; then
  echo "long-cost: needs $model and $src (run scripts/real-model.sh)" >&2
  exit 2
fi
go build -o bin/convert ./cmd/convert
mkdir -p "$out/docs"
longest=0
for n in "${lengths[@]}"; do [ "$n" -gt "$longest" ] && longest=$n; done

# Documents: DOCS documents (default 8), each the source files appended
# in name order from its own starting file on until it has WORDS words
# (default 13000, more than 16K wordpieces), so timings average over
# several documents and the first run's warm-up weighs little.
rm -f "$out"/docs/*.txt
mapfile -t files < <(ls "$src"/tune/*.txt "$src"/heldout/*.txt | sort)
WORDS=${WORDS:-13000}
for ((d = 0; d < DOCS; d++)); do
  doc="$out/docs/doc$d.txt"
  : > "$doc"
  for ((k = 0; ; k++)); do
    cat "${files[$(((d * 7 + k) % ${#files[@]}))]}" >> "$doc"
    [ "$(wc -w < "$doc")" -ge "$WORDS" ] && break
  done
done

# Models (cached): the long model and the copy-extended full-attention one.
maxlen=$((longest + 2 * (longest / 510 + 1)))
[ -f "$out/long-$maxlen.onnx" ] || bin/convert long "$model" -o "$out/long-$maxlen.onnx" --max-length "$maxlen" >/dev/null
[ -f "$out/full-$FULL_MAX.onnx" ] || bin/convert extend-positions "$model" -o "$out/full-$FULL_MAX.onnx" --max-positions "$FULL_MAX" >/dev/null

# run SYSTEM MODEL MODE TOKENS: one process; prints "seconds/doc peakMiB".
run() {
  local log="$out/$1-$4.log"
  bin/convert embed "$2" --docs "$out/docs" --mode "$3" --max-tokens "$4" --threads "$THREADS" \
    -o "$out/$1-$4.npy" --stats >"$log" 2>&1 || { echo "failed (see $log)"; return; }
  local each rss
  each=$(sed -n 's/^embedded .*(\([0-9.]*\) s each.*/\1/p' "$log")
  rss=$(grep -o 'peak RSS [0-9.]* [KMG]i*B' "$log" | head -n 1 | sed 's/peak RSS //')
  printf '%s | %s' "$each" "$rss"
}

echo "| tokens | system | seconds per document | peak RSS |"
echo "|---|---|---|---|"
for n in "${lengths[@]}"; do
  echo "| $n | truncate to 512 | $(run truncate "$model" truncate "$n") |"
  echo "| $n | chunk-and-mean (510) | $(run chunk "$model" chunk "$n") |"
  if [ "$n" -le "$FULL_MAX" ]; then
    echo "| $n | full attention, positions copied | $(run full "$out/full-$FULL_MAX.onnx" long "$((n - 2))") |"
  else
    echo "| $n | full attention, positions copied | not run (score tensors ≈ $(awk -v n="$n" 'BEGIN { printf "%.1f", 2*12*n*n*4/1e9 }') GB) | |"
  fi
  echo "| $n | convert long | $(run long "$out/long-$maxlen.onnx" long "$n") |"
done
