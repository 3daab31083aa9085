#!/usr/bin/env bash
# real-text.sh makes long real English documents for calibrating and
# measuring conversions of the real model at 128, 256 and 512 tokens
# (`linlab report-real --docs testdata/real/docs`).
#
#   scripts/real-text.sh           install the docs package (once) + extract
#
# Source: the reStructuredText sources of the CPython documentation that the
# Debian package python3.X-doc ships as plain text
# (/usr/share/doc/python3.X/html/_sources/**/*.rst.txt). The script picks the
# python3.X-doc that the distribution's python3-doc depends on (override with
# DOC_PKG=python3.11-doc) and installs it with apt-get when it is missing.
#
# The project's Go program cmd/internal/doctext strips the markup (code
# blocks, directives, tables, comments, heading underlines, roles such as
# :func:`x` → x, inline literals, links, substitutions) and keeps paragraphs
# of prose; each source file becomes one document, one line, paragraphs
# joined by spaces, cut after its first 1500 words. Only documents of at
# least MIN_WORDS words (default 600) are kept, and, when the real model's
# tokenizer is present (testdata/real/minilm, from scripts/real-model.sh),
# only those of more than 512 WordPiece tokens.
#
# Held-out and calibration documents come from different source files AND
# different folders: held-out from tutorial/, faq/, howto/, whatsnew/;
# calibration from every other folder (library/, reference/, c-api/,
# using/, extending/, …); top-level files are not used. Within a set, the
# eligible files are sorted by path and picked evenly spaced, so the output
# is deterministic for a given package version (recorded in SOURCE).
#
# Output (testdata/real/ is gitignored):
#   testdata/real/docs/heldout.txt       32 documents (HELDOUT=32)
#   testdata/real/docs/calibration.txt   64 documents (CALIBRATION=64)
#   testdata/real/docs/SOURCE            package, version, selection
#   testdata/real/longdocs/{tune,heldout}/*.txt  documents of ≥ 4608 tokens,
#                                        one per file (with the tokenizer)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out="$root/testdata/real/docs"
HELDOUT=${HELDOUT:-32}
CALIBRATION=${CALIBRATION:-64}
MIN_WORDS=${MIN_WORDS:-600}

if [ $# -gt 0 ]; then
  echo "real-text: unexpected argument $1 (the script takes none; see its header for variables)" >&2
  exit 1
fi
log() { printf 'real-text: %s\n' "$*"; }

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# 1. Which python3.X-doc this distribution has: the one python3-doc depends on.
pkg=${DOC_PKG:-}
if [ -z "$pkg" ]; then
  pkg=$(apt-cache depends python3-doc 2>/dev/null | grep -o 'python3\.[0-9]*-doc' | head -n 1 || true)
  if [ -z "$pkg" ]; then
    log "apt-get update (to find python3-doc)"
    $sudo apt-get update -qq
    pkg=$(apt-cache depends python3-doc 2>/dev/null | grep -o 'python3\.[0-9]*-doc' | head -n 1 || true)
  fi
fi
if [ -z "$pkg" ]; then
  echo "real-text: cannot find a python3.X-doc package (apt-cache depends python3-doc); set DOC_PKG" >&2
  exit 2
fi
ver=${pkg#python}
ver=${ver%-doc}
src="/usr/share/doc/python$ver/html/_sources"

# 2. Install it once.
if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
  log "apt-get install $pkg"
  if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null; then
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
  fi
fi
if [ ! -d "$src" ]; then
  echo "real-text: $src is missing after installing $pkg" >&2
  exit 2
fi
pkgver=$(dpkg-query -W -f='${Version}' "$pkg")

# 3. Strip the markup with the project's Go code and write the two sets.
mkdir -p "$out"
log "extracting prose from $src ($pkg $pkgver) (go run ./cmd/internal/doctext)"
vocab=()
[ -f "$root/testdata/real/minilm/tokenizer.json" ] && vocab=(-vocab "$root/testdata/real/minilm" -min-tokens 512)
go run ./cmd/internal/doctext -src "$src" -o "$out" \
  -heldout "$HELDOUT" -calibration "$CALIBRATION" -min-words "$MIN_WORDS" \
  -heldout-dirs tutorial,faq,howto,whatsnew "${vocab[@]}"
{
  echo "package $pkg $pkgver"
  echo "source $src"
  echo "heldout $HELDOUT documents from tutorial/ faq/ howto/ whatsnew/"
  echo "calibration $CALIBRATION documents from every other folder"
  echo "min-words $MIN_WORDS"
  [ ${#vocab[@]} -eq 0 ] || echo "min-tokens 512 (testdata/real/minilm tokenizer)"
} > "$out/SOURCE"
# 4. Long documents (≥ 4608 WordPiece tokens, whole paragraphs up to 16384)
# for the long-document retrieval test (`convert evaluate`): one file each,
# tuning set from the calibration folders, held-out set from the held-out
# folders.
if [ ${#vocab[@]} -gt 0 ]; then
  log "long documents into testdata/real/longdocs (go run ./cmd/internal/doctext -long-out)"
  rm -rf "$root/testdata/real/longdocs"
  go run ./cmd/internal/doctext -src "$src" -long-out "$root/testdata/real/longdocs" \
    -heldout-dirs tutorial,faq,howto,whatsnew -vocab "$root/testdata/real/minilm"
fi
log "ready: $out/heldout.txt, $out/calibration.txt"
