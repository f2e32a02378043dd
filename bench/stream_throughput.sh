#!/usr/bin/env bash
# Streamed input against input loaded whole (issue 33's goal: at least
# 0.9x): `pstrain local --model=wide_deep --ps=2 --workers=2` trains the
# same generated Criteo file with and without --stream_data (each worker
# its byte range of the file, shuffled in blocks of --shuffle_buffer),
# in alternate runs, and prints each run's examples/s (the chief's
# summary: examples trained / training seconds), each pair's ratio and the
# workers' peak resident memory.
# Usage: bench/stream_throughput.sh [build_dir] [rows] [pairs]
set -euo pipefail
build=${1:-build}
rows=${2:-300000}
pairs=${3:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1
"$build/bin/pstrain" generate_criteo --out="$out/all.tsv" --rows="$rows" --seed=2 > /dev/null
held=$((rows / 10))
head -n $((rows - held)) "$out/all.tsv" > "$out/train.tsv"
tail -n "$held" "$out/all.tsv" > "$out/eval.tsv"
rm "$out/all.tsv"
run() {  # $1: loaded|streamed -> "examples/s peak_MB_worker0 peak_MB_worker1"
  local extra=()
  [ "$1" = streamed ] && extra=(--stream_data)
  "$build/bin/pstrain" local --model=wide_deep --data="$out/train.tsv" \
    --eval_data="$out/eval.tsv" --ps=2 --workers=2 --epochs=2 "${extra[@]}" \
    --summary_json="$out/$1.json" > "$out/$1.log" 2>&1
  local rate peaks
  rate=$(/usr/bin/python3 -c "import json; print(json.load(open('$out/$1.json'))['examples_per_sec'])")
  peaks=$(grep -o 'peak resident memory [0-9.]* MB' "$out/$1.log" | grep -o '[0-9.]*' | tr '\n' ' ')
  echo "$rate $peaks"
}
printf '%s rows (%s MB), 2 epochs, 2 ps + 2 workers; load average %s\n' "$((rows - held))" \
  "$(( $(stat -c %s "$out/train.tsv") / 1000000 ))" "$(cut -d' ' -f1 /proc/loadavg)"
printf '%-6s %14s %14s %8s %22s %22s\n' pair "loaded ex/s" "streamed ex/s" ratio \
  "loaded peak MB (w0 w1)" "streamed peak MB"
for pair in $(seq 1 "$pairs"); do
  read -r loaded l0 l1 <<< "$(run loaded)"
  read -r streamed s0 s1 <<< "$(run streamed)"
  printf '%-6s %14.0f %14.0f %8.3f %22s %22s\n' "$pair" "$loaded" "$streamed" \
    "$(/usr/bin/python3 -c "print($streamed / $loaded)")" "$l0 $l1" "$s0 $s1"
done
