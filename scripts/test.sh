#!/usr/bin/env bash
# Every test: stray files, formatting, lints, the docs (book build and link
# check), then unit + integration tests of all crates
# (real local clusters, redis-cli, the checker on reference histories, the
# simulator's fixed seeds, three hosts partitioned in network namespaces),
# then the container image and the docker-compose cluster. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
echo "== no stray files (tracked *.orig, *.rej, *~)"
if git ls-files | grep -E '(\.orig|\.rej|~)$'; then echo "stray files above are tracked: git rm them" >&2; exit 1; fi
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== seam check (no protocol name outside crates/core)"
scripts/seam-check.sh
echo "== structure: no import circle or arrow back up, no function over 80 lines (scripts/structure-check.py)"
python3 scripts/structure-check.py
echo "== docs: mdbook build + link check (scripts/docs-check.sh)"
scripts/docs-check.sh
echo "== cargo nextest"
cargo nextest run --workspace --no-fail-fast "$@"
echo "== deployment: container image + docker-compose cluster (scripts/deploy-check.sh)"
scripts/deploy-check.sh
