#!/usr/bin/env bash
# web-check-setup.sh installs what the JavaScript-runtime check needs: the
# npm packages onnxruntime-web (the WASM build the browser runs),
# onnxruntime-node and their shared onnxruntime-common, at the version of
# the C library scripts/setup.sh installs, into .tools/node/node_modules
# (gitignored). cmd/convert's TestWebRuntimes runs every conversion of the
# test model through testdata/web/run_ort.mjs in both and compares with
# `convert run`; it skips, naming this script, until the packages are here.
#
#   bash scripts/web-check-setup.sh
#
# Each package is fetched with `npm pack` (the registry's tarball, checked
# against the sha256 pinned below) and unpacked; nothing runs `npm
# install`, so no package script runs (onnxruntime-node's would download
# binaries: its tarball already holds the Linux x64 and arm64 bindings
# with libonnxruntime) and no other dependency is fetched (the Node builds
# of onnxruntime-web bundle theirs but onnxruntime-common; onnxruntime-node
# needs only onnxruntime-common at run time). Of onnxruntime-node only this
# machine's Linux binding is kept. Re-running it is cheap: a stamp records
# what is installed. Needs node >= 18 and npm (scripts/setup.sh installs
# them).
set -euo pipefail

ORT_VERSION=1.30.0
# sha256 of the npm tarballs NAME-$ORT_VERSION.tgz (onnxruntime-node's is
# the one scripts/setup.sh pins).
declare -A SHA256=(
  [onnxruntime-common]=7906c439e0d3e0f4048caa23b64cdfadc0f455c377f579ce1ab2a4b778f07d5f
  [onnxruntime-node]=6e3390d6b783e7be946fad629292799da28d0b42f84856e50d2c1b0383291e75
  [onnxruntime-web]=d2228df7e4616bc3348bf504ee888f3bec43789a273f0a63f3e68d203ce3bf71
)
PACKAGES=(onnxruntime-common onnxruntime-node onnxruntime-web)

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/.tools"
modules="$tools/node/node_modules"
dl="$tools/dl/node"
stamp="$tools/node/VERSION"

log() { printf 'web-check-setup: %s\n' "$*"; }
die() { printf 'web-check-setup: %s\n' "$*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || die "node is not installed (scripts/setup.sh installs it with npm; or apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm is not installed (scripts/setup.sh installs it; or apt-get install npm)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || die "node $(node --version) is too old: onnxruntime-web $ORT_VERSION needs node 18 or newer"

case "$(uname -s)/$(uname -m)" in
Linux/x86_64 | Linux/amd64) ortarch=x64 ;;
Linux/aarch64 | Linux/arm64) ortarch=arm64 ;;
*) die "onnxruntime-node ships Linux bindings for x86_64 and aarch64 only, not $(uname -s)/$(uname -m)" ;;
esac

want="$ORT_VERSION linux-$ortarch"
for p in "${PACKAGES[@]}"; do want+=" $p:${SHA256[$p]}"; done
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  ok=1
  for p in "${PACKAGES[@]}"; do [ -f "$modules/$p/package.json" ] || ok=0; done
  if [ "$ok" = 1 ]; then
    log "onnxruntime-web, -node, -common $ORT_VERSION already in $modules"
    exit 0
  fi
fi

rm -f "$stamp"
mkdir -p "$modules" "$dl"
for p in "${PACKAGES[@]}"; do
  tgz="$dl/$p-$ORT_VERSION.tgz"
  if [ ! -f "$tgz" ] || [ "$(sha256sum "$tgz" | awk '{print $1}')" != "${SHA256[$p]}" ]; then
    log "npm pack $p@$ORT_VERSION"
    rm -f "$tgz"
    (cd "$dl" && npm pack --silent --ignore-scripts "$p@$ORT_VERSION" >/dev/null)
  fi
  got=$(sha256sum "$tgz" | awk '{print $1}')
  if [ "$got" != "${SHA256[$p]}" ]; then
    rm -f "$tgz"
    die "$tgz has sha256 $got, want ${SHA256[$p]}"
  fi
  # Unpack beside the target and rename into place, so that a stopped run
  # leaves no half package behind.
  tmp="$modules/.$p.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  excludes=()
  if [ "$p" = onnxruntime-node ]; then
    excludes=(--exclude=package/bin/napi-v6/win32 --exclude=package/bin/napi-v6/darwin)
    for a in x64 arm64; do [ "$a" = "$ortarch" ] || excludes+=("--exclude=package/bin/napi-v6/linux/$a"); done
  fi
  tar -xzf "$tgz" -C "$tmp" --strip-components=1 --no-same-owner "${excludes[@]}"
  got=$(node -p 'require(process.argv[1]).version' "$tmp/package.json")
  [ "$got" = "$ORT_VERSION" ] || die "$tgz unpacks to $p $got, want $ORT_VERSION"
  rm -rf "${modules:?}/$p"
  mv "$tmp" "$modules/$p"
  rm -f "$tgz"
done
binding="$modules/onnxruntime-node/bin/napi-v6/linux/$ortarch/onnxruntime_binding.node"
[ -f "$binding" ] || die "onnxruntime-node $ORT_VERSION has no binding $binding"
rmdir "$dl" 2>/dev/null || true
echo "$want" >"$stamp"
log "onnxruntime-web, -node, -common $ORT_VERSION in $modules"
