#!/usr/bin/env bash
# A rolling upgrade from REV to this checkout, under load, checked for
# linearizability.
#
#   scripts/upgrade-check.sh REV
#
# Builds REV (a commit or tag) in a temporary git worktree, starts a
# 3-replica cluster of it (durability buffered, each replica with its own
# data directory), runs `quorumkv bench` of this checkout against it as the
# client load (it records the history and checks it with the same checker
# as `quorumkv check`), and meanwhile replaces the replicas one by one by
# this checkout's build, on the same data directories. After each step it
# prints `quorumkv endpoints status` (the VERSION and WIRE columns show the
# mixed cluster). Exit 0: every replica came back and the history is
# linearizable; 1 otherwise (a failing history is kept and shown with
# `quorumkv check`).
#
# Not run in CI: it needs two builds. Both are debug builds in
# $CARGO_TARGET_DIR (REV's first, its binary copied out, then this
# checkout's), so the target directory's quorumkv is this checkout's after.
#
# Environment: DURATION (seconds of load, default 40), STEP (seconds between
# replacements, default 6), PROTOCOL (default abd), KEEP=1 keeps the work
# directory.
set -euo pipefail

REV=${1:?usage: scripts/upgrade-check.sh REV (the release to upgrade from)}
DURATION=${DURATION:-40}
STEP=${STEP:-6}
PROTOCOL=${PROTOCOL:-abd}
ROOT=$(git rev-parse --show-toplevel)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$(mktemp -d /tmp/qkv-upgrade.XXXXXX)
OLD_SRC=$WORK/old-src
declare -A PIDS=()
BENCH_PID=

say() { echo "upgrade-check: $*" >&2; }

cleanup() {
    for id in "${!PIDS[@]}"; do kill "${PIDS[$id]}" 2>/dev/null || true; done
    [ -n "$BENCH_PID" ] && kill "$BENCH_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    git -C "$ROOT" worktree remove --force "$OLD_SRC" 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

say "building $REV in $OLD_SRC"
git -C "$ROOT" worktree add --detach "$OLD_SRC" "$REV" >/dev/null
(cd "$OLD_SRC" && CARGO_TARGET_DIR=$TARGET cargo build --bin quorumkv)
cp "$TARGET/debug/quorumkv" "$WORK/quorumkv-old"
git -C "$ROOT" worktree remove --force "$OLD_SRC"
# REV's workspace crates have this checkout's artifact names in $TARGET, and
# cargo judges freshness by modification times: without this touch it would
# take REV's build, newer than these sources, for this checkout's.
git -C "$ROOT" ls-files -z -- '*.rs' | (cd "$ROOT" && xargs -0 touch)
say "building this checkout"
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --bin quorumkv)
cp "$TARGET/debug/quorumkv" "$WORK/quorumkv-new"
OLD=$WORK/quorumkv-old
NEW=$WORK/quorumkv-new
"$NEW" version >/dev/null || { say "this checkout's build has no 'version' command: stale build?"; exit 1; }
say "from: $("$OLD" --version | head -1); to: $("$NEW" version | tr '\n' ';')"

# Three free ports, and the cluster file.
read -r -a PORTS <<<"$(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
{
    echo "protocol = \"$PROTOCOL\""
    echo 'cluster_id = "upgrade-check"'
    echo 'durability = "buffered"'
    for i in 1 2 3; do
        printf '[[replica]]\nid = %d\naddr = "127.0.0.1:%d"\n' "$i" "${PORTS[$((i - 1))]}"
    done
} >"$WORK/cluster.toml"
EPS="127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[1]},127.0.0.1:${PORTS[2]}"

start() { # BINARY ID
    "$1" server --id "$2" --config "$WORK/cluster.toml" --data-dir "$WORK/data-$2" \
        >>"$WORK/replica-$2.log" 2>&1 &
    PIDS[$2]=$!
}

# Wait until replica ID answers, every replica reaches all its peers, and
# (with WIRE) replica ID speaks that wire version.
wait_whole() { # ID [WIRE]
    local deadline=$((SECONDS + 60))
    until "$NEW" endpoints status --json -e "$EPS" 2>/dev/null | python3 -c '
import json, sys
want_id, want_wire = int(sys.argv[1]), sys.argv[2]
st = json.load(sys.stdin)
ok = all("error" not in s and not s["peers_down"] for s in st)
me = [s for s in st if s.get("id") == want_id]
w = me and me[0].get("wire")
wire = "%d.%d" % (w["major"], w["minor"]) if w else "1.0"
sys.exit(0 if ok and me and (not want_wire or wire == want_wire) else 1)' "$1" "${2:-}"; do
        [ "$SECONDS" -lt "$deadline" ] || { say "replica $1 never rejoined (logs in $WORK)"; KEEP=1; exit 1; }
        sleep 0.5
    done
}

for i in 1 2 3; do start "$OLD" "$i"; done
wait_whole 1
say "cluster of $REV up at $EPS"
"$NEW" endpoints status -e "$EPS"

"$NEW" bench --target "quorumkv://$EPS" --clients 4 --get-fraction 0.5 --keys 5 \
    --duration "${DURATION}s" --warmup 0s --no-progress --out "$WORK/bench" \
    >"$WORK/bench.log" 2>&1 &
BENCH_PID=$!

NEW_WIRE=$("$NEW" version | sed -n 's/^wire protocol \([0-9.]*\).*/\1/p')
for id in 3 2 1; do
    sleep "$STEP"
    say "replacing replica $id"
    kill -TERM "${PIDS[$id]}"
    wait "${PIDS[$id]}" || true
    start "$NEW" "$id"
    wait_whole "$id" "$NEW_WIRE"
    "$NEW" endpoints status -e "$EPS"
done

say "waiting for the load to finish"
bench_rc=0
wait "$BENCH_PID" || bench_rc=$?
BENCH_PID=
tail -n 20 "$WORK/bench.log" >&2
verdict=$(python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(rows[0].get("check") or "no verdict" if rows else "no results")' "$WORK/bench/results.csv" 2>/dev/null || echo "no results")
if [ "$verdict" != ok ] || [ "$bench_rc" != 0 ]; then
    say "history check: $verdict (bench exit $bench_rc)"
    for h in "$WORK"/bench/history_*.jsonl; do
        [ -f "$h" ] && "$NEW" check "$h" >&2 || true
    done
    KEEP=1
    exit 1
fi
say "rolling upgrade from $REV: every replica replaced under load, history linearizable"
