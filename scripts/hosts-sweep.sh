#!/usr/bin/env bash
# Run `quorumkv chaos --hosts netns` over several seeds and summarise: one
# line per seed with its verdict, faults and worst heal-to-serve time, the
# whole output of each run kept in OUT_DIR.
#
#   scripts/hosts-sweep.sh OUT_DIR "1 2 3" --protocol abd --faults partition,kill,pause --duration 60s
#
# QUORUMKV_BIN picks the binary (default target/release/quorumkv, else the
# debug one). Exit 1 when any run is not LINEARIZABLE or stopped early.
set -uo pipefail
out=$1 seeds=$2
shift 2
bin=${QUORUMKV_BIN:-}
if [ -z "$bin" ]; then
  for b in target/release/quorumkv target/debug/quorumkv; do
    [ -x "$b" ] && { bin=$b; break; }
  done
fi
mkdir -p "$out"
bad=0
for s in $seeds; do
  f="$out/seed-$s.txt"
  "$bin" chaos --hosts netns --no-progress --seed "$s" "$@" >"$f" 2>&1
  rc=$?
  verdict=$(grep -o '^verdict: [A-Z_]*\( [A-Z_]\{2,\}\)*' "$f" | head -1 | cut -d' ' -f2-)
  faults=$(grep '^faults:' "$f" | cut -d' ' -f2-)
  live=$(grep '^liveness:' "$f" | grep -o 'within [0-9.]*s')
  early=$(grep '^stopped early:' "$f" | cut -c1-110)
  ops=$(grep -o '^operations: [0-9]*' "$f" | cut -d' ' -f2)
  echo "seed $s: exit $rc, ${verdict:-no verdict}, heal-to-serve ${live:-?}, ${ops:-?} ops; $faults${early:+; $early}"
  [ "$rc" = 0 ] || bad=1
done
exit $bad
