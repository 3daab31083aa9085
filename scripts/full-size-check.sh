#!/usr/bin/env bash
# full-size-check.sh checks what `convert` reads in long-context encoders
# at their published shapes rather than at the fixtures' tiny ones. It
# exports, with seeded random weights (testdata/fixtures/gen_full_size.py,
# in the fixture venv):
#   ModernBERT-base's configuration with transformers' ModernBertModel, by
#   torch.onnx's TorchScript exporter (opset 17) and its dynamo exporter
#   (opset 18), the opset 17 file in float16, int8 (quantize_dynamic) and
#   QDQ (quantize_static, the embedding table int8 behind a
#   DequantizeLinear) as onnxruntime's tools write them, and
#   jina-embeddings-v2-base's, gte-base-en-v1.5's and
#   nomic-embed-text-v1.5's shapes in TorchScript's forms;
# then, for each, prints what `convert inspect` finds and, for ModernBERT,
# converts the window layers (`convert window`) and compares the converted
# model with the original in onnxruntime at LENGTH tokens (default 1024):
# WindowAttention is exact, so the outputs agree to float rounding (to the
# rounding of the float16 and quantized forms for those).
#
#   scripts/full-size-check.sh [LENGTH]
#
# The exports take about 3 minutes and 3.6 GB in out/full-size/
# (gitignored); a re-run reuses them. Random weights say nothing of
# fidelity: this checks reading and exactness at full size.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
length=${1:-1024}
out=out/full-size
mkdir -p "$out" bin
go build -o bin/convert ./cmd/convert
if [ ! -f "$out/nomic-v1.5.onnx" ]; then
	python3 testdata/fixtures/gen_full_size.py "$out"
fi

# blocks FILE prints the count of each verdict `convert inspect` gives.
blocks() {
	bin/convert inspect "$1" | sed -n '/^attention:/,$p' | tail -n +2 |
		sed -E 's/.*bias (per-key|per-query-key|window|alibi) +//' | sort | uniq -c |
		awk '{c=$1; $1=""; printf "    %3d blocks:%s\n", c, $0}'
}

for m in modernbert-base-op17 modernbert-base-op18-dynamo modernbert-base-op17-fp16 modernbert-base-op17-int8 modernbert-base-op17-qdq; do
	echo "$m.onnx"
	blocks "$out/$m.onnx"
	bin/convert window "$out/$m.onnx" -o "$out/$m-window.onnx" >/dev/null
	bin/convert compare "$out/$m.onnx" "$out/$m-window.onnx" --random-inputs --seq-len "$length" |
		awk -v n="$length" '$2 == "output" {printf "    convert window vs the original at %d tokens (onnxruntime): max abs %s, token cosine min %s\n", n, $4, $8}'
done
for m in jina-v2-base gte-v1.5-base nomic-v1.5; do
	echo "$m.onnx"
	blocks "$out/$m.onnx"
done
