#!/usr/bin/env bash
# Training throughput against a single process: the Fashion-MNIST MLP
# (batch 64, async) trained by `pstrain local --ps=2 --workers=2`, with and
# without --overlap, and by `pstrain reference` (the same plan, initial
# values, optimizer and loop in one single-threaded process, ps in memory,
# no network). Examples/s is global step x batch / training seconds for all
# three, measured in this one run; the ratios are to the single process.
# Usage: bench/throughput.sh [build_dir] [epochs]
set -euo pipefail
build=${1:-build}
epochs=${2:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1  # single-threaded compute everywhere
rate() {  # JSON summary -> examples/s
  python3 -c "
import json, sys; d = json.load(open('$1'))
print(d['global_step'] * 64 / d['train_seconds'])"
}
"$build/bin/pstrain" reference --epochs="$epochs" --batch_size=64 > "$out/reference.json" 2> "$out/reference.log"
single=$(rate "$out/reference.json")
printf '%-40s %12s %8s\n' run examples/s "x single"
printf '%-40s %12.0f %8.2f\n' "one process, no network" "$single" 1
for overlap in false true; do
  "$build/bin/pstrain" local --ps=2 --workers=2 --mode=async --batch_size=64 --epochs="$epochs" \
    --overlap="$overlap" --summary_json="$out/cluster.json" > "$out/cluster.log" 2>&1
  cluster=$(rate "$out/cluster.json")
  printf '%-40s %12.0f %8.2f\n' "2 ps + 2 workers, async, overlap $overlap" "$cluster" \
    "$(python3 -c "print($cluster / $single)")"
  grep -h "time per step" "$out/cluster.log" | sed 's/^.*\] /    /'
done
