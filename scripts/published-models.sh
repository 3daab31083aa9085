#!/usr/bin/env bash
# published-models.sh makes the copies of the real all-MiniLM-L6-v2 model
# that published checkpoints come as, with the standard tools: fp16
# (onnxruntime.transformers' converter, keep_io_types=True), dynamic int8
# (onnxruntime.quantization.quantize_dynamic) and static QDQ
# (quantize_static) of testdata/real/minilm.onnx, into
# testdata/real/published/ with a manifest.json (the convert tests'
# real-model tier reads them). The work is done by
# testdata/fixtures/published/gen_real_published.py, which runs in the
# fixture venv .tools/onnx-venv (created on first use from PyPI pins).
#
#   scripts/published-models.sh     (scripts/setup.sh runs it after real-model.sh)
#
# Re-running is cheap: nothing is rebuilt when the copies are newer than
# minilm.onnx, or when the manifest records minilm.onnx's current sha256
# (real-model.sh rewrites the same bytes on every run).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
src="$root/testdata/real/minilm.onnx"
out="$root/testdata/real/published"

if [ $# -gt 0 ]; then
  echo "published-models: unexpected argument $1 (the script takes none)" >&2
  exit 1
fi
log() { printf 'published-models: %s\n' "$*"; }

if [ ! -f "$src" ]; then
  echo "published-models: $src is missing; run scripts/real-model.sh first" >&2
  exit 1
fi

fresh=1
for f in manifest.json minilm.fp16_ortx.onnx minilm.int8_dyn_s8.onnx minilm.qdq.onnx; do
  if [ ! -f "$out/$f" ] || [ ! "$out/$f" -nt "$src" ]; then
    fresh=0
  fi
done
if [ "$fresh" = 1 ]; then
  log "up to date: $out"
  exit 0
fi

# The fixture venv needs python3's venv module (Debian: python3-venv).
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "apt-get install python3-venv"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
fi

log "fp16, dynamic int8 and QDQ copies of testdata/real/minilm.onnx (gen_real_published.py)"
python3 "$root/testdata/fixtures/published/gen_real_published.py" "$src" "$out"
log "ready: $out"
