#!/usr/bin/env bash
# The seam's promise: no protocol name or type outside crates/core (its
# module and the registry), tests aside. For every protocol module named in
# the registry, look for its name in the code (not comments, not
# `#[cfg(test)]` modules, not tests/) of the node runtime, the simulator,
# the bench and the CLI. Prints what it finds; exits 1 if anything.
set -euo pipefail
cd "$(dirname "$0")/.."
registry=crates/core/src/protocol/registry.rs
names=$(sed -n '/^registry! {/,/^}/p' "$registry" | grep -oE 'super::[a-z_]+' | sed 's/super:://')
found=0
for f in $(git ls-files 'crates/node/src/*.rs' 'crates/sim/src/*.rs' 'crates/bench/src/*.rs' 'src/*.rs'); do
  # Code only: drop everything from the first #[cfg(test)] on, and comments.
  code=$(awk '/^ *#\[cfg\(test\)\]/{exit} {print FNR": "$0}' "$f" | grep -vE '^[0-9]+: *//' || true)
  for n in $names; do
    # rustls' crypto provider module is named `ring`, like the ring protocol.
    hits=$(grep -iwE "$n|${n}[a-z_]*::" <<<"$code" | grep -v 'rustls::crypto::ring' || true)
    if [ -n "$hits" ]; then
      sed "s|^|$f:|" <<<"$hits"
      found=1
    fi
  done
done
if [ "$found" = 1 ]; then
  echo "seam-check: protocol names above appear outside crates/core (see crates/core/src/protocol/README.md)" >&2
  exit 1
fi
list=$(echo $names | sed "s/ /, /g")
echo "seam-check: no protocol name outside crates/core ($(echo $names | wc -w) protocol(s): $list)"
