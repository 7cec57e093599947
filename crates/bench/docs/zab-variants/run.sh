#!/bin/bash
# Seed 003 chapter 5 on local clusters (memory durability = the thesis' Net-Only, 1 KB values,
# 250 closed-loop clients, N = 3, 5, 7): every variant beside Zab, three repetitions at N = 3, 5.
# Needs target/release/quorumkv (cargo build --release). ~15 min on 2 cores.
cd "$(dirname "$0")/../../../.."
V3=default,broadcast=ac,broadcast=aa,broadcast=ct,broadcast=ct-q,broadcast=aa-q,broadcast=ct-q+p=upper
V=default,broadcast=aa,broadcast=ct,broadcast=ct-q,broadcast=aa-q,broadcast=ct-q+p=upper
run() { n=$1 s=$2 v=$3; target/release/quorumkv bench --protocol zab --variant $v --replicas $n --durability memory --clients 250 --get-fraction 0.9,0.5,0.0 --value-size 1024 --duration 3s --seed $s --out crates/bench/docs/zab-variants/n$n-s$s --no-progress > crates/bench/docs/zab-variants/n$n-s$s.txt 2>&1; }
run 3 2 $V3; run 3 3 $V3
run 5 1 $V; run 5 2 $V; run 5 3 $V
run 7 1 $V
# §5.3: write ratio 100 %, 250 ... 1250 clients.
target/release/quorumkv bench --protocol zab --variant default,broadcast=ct,broadcast=ct-q,broadcast=ct-q+p=upper --replicas 3,5 --durability memory --clients 250,750,1250 --get-fraction 0.0 --value-size 1024 --duration 3s --seed 1 --out crates/bench/docs/zab-variants/load-s1 --no-progress > crates/bench/docs/zab-variants/load-s1.txt 2>&1
python3 crates/bench/docs/zab-variants/summarize.py crates/bench/docs/zab-variants/n[357]-s? > crates/bench/docs/zab-variants/table.md
