#!/usr/bin/env bash
# demo.sh shows the CLI on a bundled model: what is inside it (inspect), what
# it computes on seeded random inputs (run, through onnxruntime), its
# local+pooled, Performer and Linformer conversions, their op-by-op
# validation and how far they are from the original (compare).
# scripts/setup.sh runs it at the end; run it again any time after setup.
#
# The model is testdata/bert-tiny.onnx, a 2-layer BERT built by the
# project's own builder (linlab build-model), or, if that file is absent,
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

rel=${out#"$root"/}
step bin/convert inspect "$model"
step bin/convert run "$model" --random-inputs --batch 2 --seq-len 16 --seed 1 --out-dir "$rel"
# The main job: rewrite every attention block into a linear-attention op.
# local-pooled keeps a pretrained model's meaning best per cost (README);
# blocks of 16 and 8 segments make it compress at this toy length.
step bin/convert local-pooled "$model" -o "$rel/local-pooled.onnx" --block 16 --segments 8 --overwrite
step bin/convert performer "$model" -o "$rel/performer.onnx" --features 256 --seed 1 --overwrite
step bin/convert linformer "$model" -o "$rel/linformer.onnx" --k 32 --overwrite
# Each converted op recomputed by its Go kernel on the inputs onnxruntime fed it.
step bin/convert validate "$rel/local-pooled.onnx" --random-inputs --seq-len 100
step bin/convert validate "$rel/performer.onnx" --random-inputs --seq-len 100
step bin/convert validate "$rel/linformer.onnx" --random-inputs --seq-len 100
# What the conversion changed (zero-shot; see `convert finetune`).
step bin/convert compare "$model" "$rel/local-pooled.onnx" "$rel/performer.onnx" "$rel/linformer.onnx" --random-inputs --batch 2 --seq-len 100
echo
echo "demo: outputs and converted models are in $rel/"
