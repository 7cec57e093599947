#!/usr/bin/env python3
"""Tier 2 of scripts/mutants.sh: re-run each mutant that tier 1 missed
against the full oracle (core's unit tests and the simulator's sweeps).

    scripts/mutants_tier2.py target/mutants.out [nextest filter args...]

For each missed mutant: apply its diff to the working tree, run the oracle,
revert the diff (also when the run is interrupted: Ctrl-C or SIGTERM). Appends one line per mutant to <out>/tier2.txt:
`caught <mutant>` or `missed <mutant>`; prints the totals.
"""
import json
import os
import signal
import subprocess
import sys


def stop(signum, _frame):
    # SIGTERM (pkill, a CI timeout) ends the run through `finally` below,
    # which takes the applied mutant back out of the working tree.
    raise SystemExit(f"tier 2 stopped by signal {signum}")


signal.signal(signal.SIGTERM, stop)

out = sys.argv[1]
nextest_filter = sys.argv[2:]
env = dict(os.environ, CARGO_INCREMENTAL="0", CARGO_PROFILE_DEV_DEBUG="0",
           CARGO_PROFILE_TEST_DEBUG="0")
timeout = int(os.environ.get("MUTANTS_TIER2_TIMEOUT", "600"))
with open(os.path.join(out, "outcomes.json")) as f:
    outcomes = json.load(f)["outcomes"]
missed = [o for o in outcomes if o["summary"] == "MissedMutant"]
oracle = ["cargo", "nextest", "run", "-p", "quorumkv-core", "-p", "quorumkv-sim",
          "--lib", "--test", "oracle", "--no-fail-fast", *nextest_filter]
counts = {"caught": 0, "missed": 0}
with open(os.path.join(out, "tier2.txt"), "a") as log:
    for o in missed:
        name = o["scenario"]["Mutant"]["name"]
        diff = os.path.join(out, o["diff_path"])
        # cargo-mutants' diffs name the file on the `---` line only.
        with open(diff) as d:
            path = d.readline().removeprefix("--- ").strip()
        patch = ["patch", "--quiet", "--forward", path, "-i", diff]
        subprocess.run(patch, check=True)
        try:
            r = subprocess.run(oracle, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=timeout)
            verdict = "missed" if r.returncode == 0 else "caught"
        except subprocess.TimeoutExpired:
            verdict = "caught"  # a timeout counts as caught, as in tier 1
        finally:
            subprocess.run(patch + ["--reverse"], check=True)
        counts[verdict] += 1
        log.write(f"{verdict} {name}\n")
        log.flush()
        print(f"{verdict}: {name}", flush=True)
print(f"tier 2: {counts['caught']} caught, {counts['missed']} missed of {len(missed)}")
