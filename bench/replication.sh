#!/bin/bash
# Replicated ps (--ps_replicas=2) figures, from real jobs on this machine
# (loopback: the backups' traffic and work share its cores with everything
# else). Prints:
#   - steady-state examples/s of the same job with and without replication,
#     from interleaved runs (off, on, off, on), and their ratio;
#   - ps_bench's PushPull GB/s with and without replication, interleaved, on
#     loopback and (as root) behind shaped 2gbit links, and their ratios;
#   - a failover: ps:0 killed (kill -9) mid-training; the time from the kill
#     to its detection and to the first push applied on the new primary,
#     the steps lost, and how long ps:0, restarted, took to be sent its
#     shards whole (a resync) and be their backup again.
# Usage: bench/replication.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-$BUILD/bench_replication}
PY=/usr/bin/python3
rm -rf "$OUT" && mkdir -p "$OUT"
JOB=(--ps=2 --workers=2 --mode=async --epochs=2 --batch_size=64 --progress=off)

for round in 1 2; do
  for replicas in 1 2; do
    name="r${replicas}_${round}"
    "$BUILD/bin/pstrain" local "${JOB[@]}" --ps_replicas=$replicas \
      --summary_json="$OUT/$name.json" >"$OUT/$name.log" 2>&1 ||
      { echo "the run $name failed; see $OUT/$name.log"; exit 1; }
  done
done
$PY - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rate = {r: [json.load(open(f"{out}/r{r}_{k}.json"))["examples_per_sec"] for k in (1, 2)]
        for r in (1, 2)}
for r in (1, 2):
    print(f"--ps_replicas={r}: " + ", ".join(f"{x:.0f}" for x in rate[r]) + " examples/s")
mean = {r: sum(v) / len(v) for r, v in rate.items()}
print(f"replicated / unreplicated: {mean[2] / mean[1]:.2f}x (mlp, 2 ps, 2 workers, loopback)")
PY

# PushPull GB/s of ps_bench (2 ps, 2 client threads, 16M floats per
# PushPull), with and without a backup of each shard, interleaved: on
# loopback, and (as root, with iproute2 and iptables) with each ps behind a
# 2gbit link of its own, the backups' traffic crossing them too.
pushpull() {  # LINK_RATE REPLICAS NAME
  "$BUILD/bin/ps_bench" --ps=2 --workers=2 --sizes=16M --cases=pushpull --rounds=2 \
    --seconds_per_case=4 --scaling=false --reference_seconds=1 --link_rate="$1" \
    --ps_replicas="$2" --json="$OUT/$3.json" >"$OUT/$3.log" 2>&1 ||
    { echo "ps_bench $3 failed; see $OUT/$3.log"; exit 1; }
}
rates=("")
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v iptables >/dev/null; then
  rates+=(2gbit)
fi
for rate in "${rates[@]}"; do
  for round in 1 2; do
    for replicas in 1 2; do pushpull "$rate" $replicas "pb${rate:-lo}_r${replicas}_${round}"; done
  done
done
$PY - "$OUT" "${rates[@]}" <<'PY'
import json, sys
out, rates = sys.argv[1], sys.argv[2:] or [""]
for rate in rates:
    gbps = {r: [next(e["gbps"] for e in json.load(open(f"{out}/pb{rate or 'lo'}_r{r}_{k}.json"))
                     ["results"] if e["op"] == "pushpull") for k in (1, 2)] for r in (1, 2)}
    where = f"each ps behind a {rate} link" if rate else "loopback"
    for r in (1, 2):
        print(f"PushPull 16M, --ps_replicas={r}, {where}: "
              + ", ".join(f"{x:.3f}" for x in gbps[r]) + " GB/s")
    mean = {r: sum(v) / len(v) for r, v in gbps.items()}
    print(f"replicated / unreplicated PushPull: {mean[2] / mean[1]:.2f}x ({where})")
PY

# A failover.
"$BUILD/bin/pstrain" local "${JOB[@]}" --ps_replicas=2 --restart_failed --peer_timeout_s=5 \
  --progress=plain --log_every_s=0.5 --summary_json="$OUT/failover.json" >"$OUT/failover.log" 2>&1 &
launcher=$!
trap 'kill $launcher 2>/dev/null || true' EXIT
until grep -q 'backups 2/2 in sync' "$OUT/failover.log"; do
  kill -0 $launcher 2>/dev/null || { echo "the job ended early; see $OUT/failover.log"; exit 1; }
  sleep 0.2
done
sleep 2
victim=$(grep -o 'started ps:0 (pid [0-9]*)' "$OUT/failover.log" | tail -1 | grep -o '[0-9]*)' | tr -d ')')
killed_ms=$(date +%s%3N)
kill -9 "$victim"
wait $launcher
trap - EXIT
grep -E "failed over" "$OUT/failover.log" | sed 's/^/  /'
$PY - "$OUT/failover.json" "$killed_ms" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); killed = int(sys.argv[2])
print(f"test accuracy {s['test_accuracy']:.4f}, {s['examples_per_sec']:.0f} examples/s, "
      f"{len(s['recoveries'])} restore(s)")
for f in s["failovers"]:
    for shard in f["shards"]:
        first = shard.get("first_push_unix_ms")
        print(f"shard {shard['shard']} -> ps {shard['new_primary']}: kill -> detected "
              f"{(f['detected_unix_ms'] - killed) / 1e3:.2f} s, -> promoted "
              f"{(f['promoted_unix_ms'] - killed) / 1e3:.2f} s, -> first push applied "
              + (f"{(first - killed) / 1e3:.2f} s" if first else "never")
              + f"; {f['steps_lost']} step(s) lost")
for r in s.get("resyncs", []):
    took = f"{r['seconds']:.2f} s" if "seconds" in r else "not seen in sync"
    print(f"shard {r['shard']} sent whole to ps {r['backup']} (back after the kill): "
          f"in sync {took} after it was asked for")
PY
