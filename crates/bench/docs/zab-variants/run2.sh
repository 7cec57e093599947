#!/bin/bash
# Seed 003 chapter 5, second round: the repetitions left from run.sh (N = 7
# seeds 2-3, N = 9 seeds 1-3) and §5.2's adaptive choices of p (ZabCT_u =
# upper, ZabCT_a = mid, ZabCT_aa = low) beside Zab with think time 0 and
# U(25, 75) ms, N = 3, 5, 7, 9, three repetitions. Memory durability (the
# thesis' Net-Only), 1 KB values, 250 closed-loop clients.
# Needs target/release/quorumkv (cargo build --release). ~30 min on 2 cores.
cd "$(dirname "$0")/../../../.."
D=crates/bench/docs/zab-variants
V=default,broadcast=aa,broadcast=ct,broadcast=ct-q,broadcast=aa-q,broadcast=ct-q+p=upper
A=default,broadcast=ct-q+p=upper,broadcast=ct-q+p=mid,broadcast=ct-q+p=low
bench() { out=$1; shift; target/release/quorumkv bench --protocol zab --durability memory --clients 250 --value-size 1024 --duration 3s --no-progress --out $D/$out "$@" > $D/$out.txt 2>&1; }
for s in 2 3; do bench n7-s$s --variant $V --replicas 7 --get-fraction 0.9,0.5,0.0 --seed $s; done
for s in 1 2 3; do bench n9-s$s --variant $V --replicas 9 --get-fraction 0.9,0.5,0.0 --seed $s; done
# §5.2: the adaptive p with and without think time.
for s in 1 2 3; do
    bench adapt-s$s --variant $A --replicas 3,5,7,9 --get-fraction 0.9,0.0 --seed $s
    bench adapt-think-s$s --variant $A --replicas 3,5,7,9 --get-fraction 0.9,0.0 --think 25ms..75ms --seed $s
done
python3 $D/summarize.py $D/n[3579]-s? > $D/table.md
python3 $D/summarize.py --tails $D/adapt-s? > $D/adaptive.md
python3 $D/summarize.py --tails $D/adapt-think-s? > $D/adaptive-think.md
