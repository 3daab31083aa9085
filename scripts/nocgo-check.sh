#!/usr/bin/env bash
# nocgo-check.sh proves the pure-Go core needs neither cgo nor the
# onnxruntime shared library: every package builds with CGO_ENABLED=0 for
# this machine and cross-compiled for linux/arm64 and darwin/arm64, the
# tests compile that way (go vet), both binaries (convert, linlab) link
# statically, and a convert binary built without cgo inspects, converts,
# validates, runs and compares the bundled model on the native backend (and
# inspects one the no-cgo linlab builds), and refuses --backend ort with an
# error that says why.
#
#   scripts/nocgo-check.sh
#
# Exit status: 0 when all of that holds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for target in "$(go env GOOS)/$(go env GOARCH)" linux/arm64 darwin/arm64; do
	echo "nocgo: CGO_ENABLED=0 GOOS=${target%/*} GOARCH=${target#*/} go build ./..."
	CGO_ENABLED=0 GOOS="${target%/*}" GOARCH="${target#*/}" go build ./...
done
echo "nocgo: CGO_ENABLED=0 go vet ./..."
CGO_ENABLED=0 go vet ./...

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin="$work/convert"
lab="$work/linlab"
CGO_ENABLED=0 go build -o "$bin" ./cmd/convert
CGO_ENABLED=0 go build -o "$lab" ./cmd/linlab
for b in "$bin" "$lab"; do
	if command -v ldd >/dev/null && ldd "$b" >/dev/null 2>&1; then
		echo "nocgo: $b is dynamically linked:" >&2
		ldd "$b" >&2
		exit 1
	fi
done
# No onnxruntime anywhere it could be found, so nothing below can use it.
export ONNXRUNTIME_SHARED_LIBRARY_PATH=/nonexistent/libonnxruntime.so

model=testdata/bert-tiny.onnx
step() { printf 'nocgo: $ convert %s\n' "$*"; "$bin" "$@" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }; }
step inspect "$model"
printf 'nocgo: $ linlab build-model -o %s\n' "$work/built.onnx"
"$lab" build-model -o "$work/built.onnx" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
step inspect "$work/built.onnx"
step local-pooled "$model" -o "$work/lp.onnx" --block 16 --segments 8
step performer "$model" -o "$work/pf.onnx" --features 64 --seed 1
step validate "$work/lp.onnx" --random-inputs --seq-len 100
step validate "$work/pf.onnx" --random-inputs --seq-len 100
step run "$work/lp.onnx" --random-inputs --seq-len 40
step compare "$model" "$work/lp.onnx" --random-inputs --seq-len 40
if "$bin" run "$model" --backend ort --random-inputs >"$work/log" 2>&1; then
	echo "nocgo: run --backend ort succeeded in a binary built without cgo" >&2
	exit 1
fi
if ! grep -q "built without onnxruntime support" "$work/log"; then
	echo "nocgo: run --backend ort failed without saying why:" >&2
	cat "$work/log" >&2
	exit 1
fi
echo "nocgo: ok (pure-Go core builds for 3 targets; the no-cgo binaries build a model, convert, validate, run and compare natively)"
