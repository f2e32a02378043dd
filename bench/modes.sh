#!/usr/bin/env bash
# Compares the training modes on the same job (Fashion-MNIST MLP, 2 ps, 3
# workers, a fixed number of updates), with and without one artificially
# slow worker. Prints one line per run; "vs fast" is the run's updates per
# second as a ratio of the same mode without the slow worker.
# Usage: bench/modes.sh [build_dir] [updates] [slow_delay_ms]
set -euo pipefail
build=${1:-build}
updates=${2:-900}
delay=${3:-50}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-28s %8s %9s %11s %10s %9s %8s %10s %8s\n' run accuracy updates/s examples/s \
  "stale mean" "stale max" dropped "barrier s" "vs fast"
for mode in async sync sync-backup ssp; do
  flags=(--mode="${mode%-backup}")
  lr=0.001
  case $mode in
    sync) lr=0.002 ;;
    sync-backup) lr=0.002; flags+=(--replicas_to_aggregate=2) ;;
    ssp) flags+=(--staleness=2) ;;
  esac
  base=""
  for slow in no yes; do
    extra=()
    [ "$slow" = yes ] && extra=(--slow_worker=2 --slow_worker_delay_ms="$delay")
    json="$out/$mode-$slow.json"
    "$build/bin/pstrain" local --ps=2 --workers=3 --epochs=100 --max_steps="$updates" \
      --learning_rate="$lr" "${flags[@]}" "${extra[@]}" --summary_json="$json" \
      > "$out/$mode-$slow.log" 2>&1
    read -r acc ups eps smean smax dropped barrier < <(python3 -c "
import json; d = json.load(open('$json'))
print(d['test_accuracy'], d['global_step'] / d['train_seconds'], d['examples_per_sec'],
      d['staleness_mean'], d['staleness_max'], d['stale_dropped'], d['barrier_wait_seconds'])")
    ratio="-"
    if [ "$slow" = no ]; then base=$ups; else ratio=$(python3 -c "print(f'{$ups / $base:.2f}')"); fi
    printf '%-28s %8.4f %9.1f %11.0f %10.2f %9d %8d %10.1f %8s\n' "$mode, slow worker: $slow" \
      "$acc" "$ups" "$eps" "$smean" "$smax" "$dropped" "$barrier" "$ratio"
  done
done
