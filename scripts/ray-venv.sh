#!/usr/bin/env bash
# ray-venv.sh creates .tools/ray-venv (gitignored), a Python virtual
# environment with the pinned packages of the Ray Data recipe
# (recipes/ray/requirements.txt: ray[data], onnxruntime, tokenizers, numpy,
# pyarrow, pandas from PyPI). Python is recipe tooling only, never the
# product path: cmd/convert's TestRayRecipe runs recipes/ray/embed_ray.py
# with this venv's python and skips, naming this script, without it.
#
#   bash scripts/ray-venv.sh          create or update the venv
#   bash scripts/ray-venv.sh --force  delete it and create it anew
#
# Re-running it is cheap: it does nothing when the venv already holds the
# pins (a stamp file records the requirements it was made from).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.tools/ray-venv"
req="$root/recipes/ray/requirements.txt"
stamp="$venv/.requirements.sha256"

log() { printf 'ray-venv: %s\n' "$*"; }

for a in "$@"; do
  case "$a" in
    --force) rm -rf "$venv" ;;
    *) echo "ray-venv: unknown flag $a (use --force)" >&2; exit 1 ;;
  esac
done

want=$(sha256sum "$req" | awk '{print $1}')
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  log "$venv is up to date"
  exit 0
fi

py=${PYTHON:-python3}
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
  echo "ray-venv: $py is missing or older than Python 3.10 (set PYTHON=...)" >&2
  exit 1
fi
if ! "$py" -m venv --help >/dev/null 2>&1; then
  echo "ray-venv: $py has no venv module (Debian: apt-get install python3-venv)" >&2
  exit 1
fi

mkdir -p "$root/.tools"
[ -x "$venv/bin/python" ] || { log "creating $venv"; "$py" -m venv "$venv"; }
log "installing $(grep -Ev '^\s*(#|$)' "$req" | tr '\n' ' ')"
# Wheels only: nothing is built from source on the machine.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: -r "$req"
# Check the imports the recipe needs, so that a broken install fails here.
"$venv/bin/python" -c 'import ray, ray.data, onnxruntime, tokenizers, numpy, pyarrow; print("ray-venv: ray", ray.__version__, "onnxruntime", onnxruntime.__version__, "tokenizers", tokenizers.__version__)'
echo "$want" > "$stamp"
log "ready: $venv ($(du -sh "$venv" | awk '{print $1}'))"
