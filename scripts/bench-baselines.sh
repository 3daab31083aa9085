#!/usr/bin/env bash
# bench-baselines.sh writes the bench model and onnxruntime's optimized
# forms of it, the baselines of `convert bench --baseline` (issue 13):
#
#   out/bench/bert-base-2l-16k.onnx   the original (linlab build-model)
#   out/bench/fused.onnx              transformers optimizer defaults (Attention)
#   out/bench/flash.onnx              MultiHeadAttention, no mask (CPU flash attention)
#   out/bench/{performer,local-pooled}.onnx and their *-ortopt-extended.onnx:
#                                     converted, then run through onnxruntime's
#                                     offline graph optimizer
#
# then prints the `convert bench` command that times them beside the
# original and the converted variants. It runs no timing itself.
#
#   scripts/bench-baselines.sh [--layers L] [--max-positions P] [--out DIR]
#
# The optimizer runs in the fixture virtual environment (.tools/fixture-venv,
# created on first use with the pins of testdata/fixtures/fixture_venv.py,
# onnxruntime included); out/ and .tools/ are gitignored.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

layers=2
maxpos=16384
out=out/bench
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers=${2:?--layers needs a value}; shift 2 ;;
    --max-positions) maxpos=${2:?--max-positions needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    *) echo "bench-baselines: unknown argument $1 (want --layers L, --max-positions P, --out DIR)" >&2; exit 1 ;;
  esac
done
case "$layers$maxpos" in
  *[!0-9]*) echo "bench-baselines: --layers and --max-positions take positive integers" >&2; exit 1 ;;
esac
log() { printf 'bench-baselines: %s\n' "$*"; }

mkdir -p "$out" bin
log "go build -o bin/convert ./cmd/convert"
go build -o bin/convert ./cmd/convert
log "go build -o bin/linlab ./cmd/linlab"
go build -o bin/linlab ./cmd/linlab

model="$out/bert-base-${layers}l-$((maxpos / 1024))k.onnx"
log "building $model"
bin/linlab build-model --preset base --num-layers "$layers" --max-positions "$maxpos" -o "$model"

log "running onnxruntime's transformers optimizer (fixture venv)"
python3 testdata/bench/ort_baselines.py "$model" "$out" --heads 12 --hidden 768

# The converted models as the bench converts them (plain FAVOR+ M = 256,
# local+pooled b = k = 64 with both sinks, seed 1), and what onnxruntime's
# offline graph optimizer (level extended) makes of them: the question is
# whether a converted model survives a user's optimization step.
log "converting for the optimizer check"
bin/convert performer "$model" -o "$out/performer.onnx" --features 256 --seed 1 --center=false --features-kind favor+ --overwrite >/dev/null
bin/convert local-pooled "$model" -o "$out/local-pooled.onnx" --overwrite >/dev/null
log "running onnxruntime's graph optimizer on the converted models (fixture venv)"
python3 testdata/bench/ort_optimize_converted.py "$out/performer.onnx" "$out/performer-ortopt" --levels extended
python3 testdata/bench/ort_optimize_converted.py "$out/local-pooled.onnx" "$out/local-pooled-ortopt" --levels extended

# Lengths from 512 up to the position table (the baselines are run as
# written, so they must cover every length).
lengths=""
for ((n = 512; n <= maxpos; n *= 2)); do lengths="$lengths${lengths:+,}$n"; done
[ -n "$lengths" ] || lengths=$maxpos

cat <<EOF

bench-baselines: done. Run the benchmark (alone on the machine; it takes a while):

bin/convert bench $model --lengths $lengths \\
    --threads 2 --repeat 3 \\
    --baseline fused=$out/fused.onnx --baseline flash=$out/flash.onnx \\
    --json-out docs/bench.json --plot docs/bench.png | tee docs/bench-table.txt

and, to see what onnxruntime's offline optimizer does to converted models:

bin/convert bench $model --lengths 4096,16384 --variants performer,local-pooled \
    --threads 2 --repeat 3 \
    --baseline performer-ortopt=$out/performer-ortopt-extended.onnx \
    --baseline local-pooled-ortopt=$out/local-pooled-ortopt-extended.onnx | tee docs/bench-ortopt.txt
EOF
