#!/usr/bin/env bash
# The documentation: build the book (docs/, mdBook) and check every link of
# README.md and the book (scripts/docs-check.py). No network once mdBook is
# installed; the first run installs it with cargo (a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
MDBOOK_VERSION=0.4.52
if ! command -v mdbook >/dev/null 2>&1 || ! mdbook --version | grep -q "v$MDBOOK_VERSION"; then
  echo "docs-check: installing mdbook $MDBOOK_VERSION (once)"
  cargo install --locked mdbook --version "$MDBOOK_VERSION" --no-default-features --features search
fi
rm -rf docs/book
log=$(mdbook build docs 2>&1) || { echo "$log" >&2; echo "docs-check: mdbook build docs failed" >&2; exit 1; }
if grep -E '\[(WARN|ERROR)\]' <<<"$log"; then
  echo "docs-check: mdbook build docs warned (above)" >&2
  exit 1
fi
python3 scripts/docs-check.py
