#!/bin/bash
# Checkpoint and recovery figures, from one real job: wide & deep with
# ~200 MB of embeddings and Adam slots on 2 ps, 2 workers, saving every few
# seconds, with ps:1 killed (kill -9) after the second save and restarted
# by `pstrain local --restart_failed`. Prints:
#   - save and restore throughput (MB/s), and how long variables were locked;
#   - training throughput during a save against between saves (pushes/s on
#     the busiest ps, and their ratio);
#   - the time from the kill to training resumed, the steps lost and the
#     batches each worker trained again.
# Usage: bench/recovery.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-$BUILD/bench_recovery}
rm -rf "$OUT" && mkdir -p "$OUT"
"$BUILD/bin/pstrain" local --ps=2 --workers=2 --model=wide_deep \
  --data=generate:rows=200000 --buckets_per_field=20000 --embedding_dim=32 --epochs=2 \
  --checkpoint_dir="$OUT/ckpt" --save_checkpoints_secs=4 --keep_checkpoints=2 \
  --restart_failed --peer_timeout_s=5 --summary_json="$OUT/summary.json" >"$OUT/log.txt" 2>&1 &
launcher=$!
trap 'kill $launcher 2>/dev/null || true' EXIT
until [ "$(grep -c 'saved checkpoint' "$OUT/log.txt" || true)" -ge 2 ]; do
  kill -0 $launcher 2>/dev/null || { echo "the job ended early; see $OUT/log.txt"; exit 1; }
  sleep 0.2
done
victim=$(grep -o 'started ps:1 (pid [0-9]*)' "$OUT/log.txt" | tail -1 | grep -o '[0-9]*)' | tr -d ')')
killed_ms=$(date +%s%3N)
kill -9 "$victim"
wait $launcher
trap - EXIT
grep -E "restored from|recovered in" "$OUT/log.txt" | sed 's/^/  /'
python3 - "$OUT/summary.json" "$killed_ms" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); killed = int(sys.argv[2])
print(f"test AUC {s['test_auc']:.4f}, {s['examples_per_sec']:.0f} examples/s")
for v in s["saves"]:
    between = v.get("pushes_per_sec_between")
    ratio = f"{v['pushes_per_sec_during'] / between:.2f}x" if between else "n/a (first save)"
    print(f"save at step {v['step']}: {v['mb']:.0f} MB in {v['seconds']:.2f} s "
          f"({v['mb_per_sec']:.0f} MB/s), snapshot {v['snapshot_ms']:.0f} ms, a variable locked {v['locked_ms']:.0f} ms at most; "
          f"training during it {v['pushes_per_sec_during']:.0f} pushes/s vs "
          f"{between or 0:.0f} between saves: {ratio}")
if "throughput_during_save_ratio" in s:
    print(f"throughput during saves / between saves: {s['throughput_during_save_ratio']:.2f}")
for r in s["recoveries"]:
    print(f"ps kill -> training resumed: {(r['resumed_unix_ms'] - killed) / 1e3:.2f} s "
          f"(restore {r['seconds']:.2f} s); restored step {r['restored_step']}, "
          f"{r['steps_lost']} step(s) lost, {r['steps_redone_total']} batch(es) trained again "
          f"(by worker: {r['steps_redone']})")
PY
