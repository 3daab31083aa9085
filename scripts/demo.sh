#!/usr/bin/env bash
# demo.sh shows the CLI on a bundled model: what is inside it (inspect) and
# what it computes on seeded random inputs (run, through onnxruntime).
# scripts/setup.sh runs it at the end; run it again any time after setup.
#
# The model is testdata/bert-tiny.onnx, a 2-layer BERT built by the
# project's own builder (convert build-model), or, if that file is absent,
# the onnxruntime test graph ../shared/corpus/ort-fusion/attention_opt.onnx.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bin="$root/bin/convert"
if [ ! -x "$bin" ]; then
  go build -o "$bin" ./cmd/convert
fi

model=testdata/bert-tiny.onnx
if [ ! -f "$model" ]; then
  model=../shared/corpus/ort-fusion/attention_opt.onnx
fi
if [ ! -f "$model" ]; then
  echo "demo: no bundled model (testdata/bert-tiny.onnx) and no corpus beside the project" >&2
  exit 1
fi
out="$root/out/demo"
mkdir -p "$out"

step() { printf '\n$ %s\n' "$*"; "$@"; }

step bin/convert inspect "$model"
step bin/convert run "$model" --random-inputs --batch 2 --seq-len 16 --seed 1 --out-dir "${out#"$root"/}"
echo
echo "demo: outputs written to ${out#"$root"/}/ (.npy and .pb per output)"
