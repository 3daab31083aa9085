#!/usr/bin/env bash
# gen-proto.sh regenerates onnx/onnxpb/onnx-ml.pb.go from the official ONNX
# schema that scripts/setup.sh installed (.tools/proto/onnx-ml.proto), with
# protoc (Debian protobuf-compiler) and protoc-gen-go at the version go.mod
# pins (.tools/bin). Run through `go generate ./onnx/onnxpb`.
#
#   gen-proto.sh [OUTDIR]   write into OUTDIR instead of onnx/onnxpb
#
# ONNX_PROTO overrides where the schema is read from.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/onnx/onnxpb}
proto=${ONNX_PROTO:-$root/.tools/proto/onnx-ml.proto}
if [ ! -f "$proto" ]; then
  echo "gen-proto: $proto not found; run scripts/setup.sh" >&2
  exit 1
fi
command -v protoc >/dev/null || { echo "gen-proto: protoc not found; run scripts/setup.sh" >&2; exit 1; }
plugin="$root/.tools/bin/protoc-gen-go"
[ -x "$plugin" ] || { echo "gen-proto: $plugin not found; run scripts/setup.sh" >&2; exit 1; }
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp "$proto" "$src/onnx-ml.proto"
mkdir -p "$out"
protoc --plugin=protoc-gen-go="$plugin" -I "$src" \
  --go_out="$out" --go_opt=paths=source_relative \
  --go_opt=Monnx-ml.proto=github.com/linearize/linearize/onnx/onnxpb \
  onnx-ml.proto
