#!/usr/bin/env bash
# duplicates.sh counts the repeated code the house issue measures: the pairs
# of places in non-test sources (no *_test.go, nothing under testdata/) that
# share runs of six or more lines, identical or of the same shape, as the
# development environment's `duplicates` tool lists them. It copies those
# files as git has them (tracked, or untracked and not ignored) to a scratch
# folder, so the tests' own fixtures do not count, and prints the tool's
# count line and rows.
#
#   scripts/duplicates.sh [MOST]     MOST rows at the most (default 200)
#
# The tool is not a project dependency and no script installs it; without
# it on PATH this says so and exits 0.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
most=${1:-200}
if ! command -v duplicates >/dev/null 2>&1; then
	echo "duplicates.sh: the duplicates tool is not on PATH; nothing measured" >&2
	exit 0
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$root"
git ls-files -z -co --exclude-standard |
	while IFS= read -r -d '' f; do
		case "$f" in
		*_test.go | testdata/* | */testdata/*) continue ;;
		esac
		# Links (the .tools and testdata/real links of a worktree) and
		# anything that is not a regular file are left out.
		if [ -L "$f" ] || [ ! -f "$f" ]; then continue; fi
		mkdir -p "$scratch/$(dirname "$f")"
		cp "$f" "$scratch/$f"
	done
cd "$scratch"
duplicates --repo "$scratch" --most "$most" --seconds 300
