#!/usr/bin/env bash
# Training throughput against a single process: the Fashion-MNIST MLP
# (batch 64, async) trained by `pstrain local --ps=2 --workers=2`, with and
# without --overlap, and by `pstrain reference` (the same plan, initial
# values, optimizer and loop in one single-threaded process, ps in memory,
# no network). Examples/s is global step x batch / training seconds for all
# three, measured in this one run; the ratios are to the single process,
# and to the same model in one single-threaded PyTorch process
# (bench/torch_mlp.py, also run on every core).
# Then, as root with iproute2, the same cluster with each ps behind a shaped
# link (`pstrain local --ps_link_rate`) of 1 and 2 Gbit/s, with float32,
# bf16 (--wire_dtype) and top-k 1% pushes (--gradient_compression) on the
# wire, interleaved: examples/s, test accuracy, and examples/s as a ratio of
# float32's behind the same link.
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
# The same model, data, batch, optimizer and epochs in one PyTorch process
# (bench/torch_mlp.py), single-threaded and on every core: "x torch" is
# each run's examples/s over the single-threaded PyTorch process's.
torch_rate() {  # threads -> examples/s, or empty without python3-torch
  /usr/bin/python3 "$(dirname "$0")/torch_mlp.py" --threads="$1" --epochs="$epochs" \
    --batch_size=64 2> /dev/null | python3 -c "import json, sys; print(json.load(sys.stdin)['examples_per_sec'])" 2> /dev/null || true
}
torch1=$(torch_rate 1)
torchn=$(torch_rate "$(nproc)")
ratio() { [ -n "$torch1" ] && python3 -c "print('%.2f' % ($1 / $torch1))" || echo -; }
printf '%-40s %12s %8s %8s\n' run examples/s "x single" "x torch"
printf '%-40s %12.0f %8.2f %8s\n' "one process, no network" "$single" 1 "$(ratio "$single")"
if [ -n "$torch1" ]; then
  printf '%-40s %12.0f %8.2f %8s\n' "PyTorch, 1 thread" "$torch1" \
    "$(python3 -c "print($torch1 / $single)")" 1.00
  printf '%-40s %12.0f %8.2f %8s\n' "PyTorch, $(nproc) threads" "$torchn" \
    "$(python3 -c "print($torchn / $single)")" "$(ratio "$torchn")"
else
  echo "(no python3-torch: the PyTorch rows are left out)"
fi
for overlap in false true; do
  "$build/bin/pstrain" local --ps=2 --workers=2 --mode=async --batch_size=64 --epochs="$epochs" \
    --overlap="$overlap" --summary_json="$out/cluster.json" > "$out/cluster.log" 2>&1
  cluster=$(rate "$out/cluster.json")
  printf '%-40s %12.0f %8.2f %8s\n' "2 ps + 2 workers, async, overlap $overlap" "$cluster" \
    "$(python3 -c "print($cluster / $single)")" "$(ratio "$cluster")"
  grep -h "time per step" "$out/cluster.log" | sed 's/^.*\] /    /'
done
if [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null; then
  echo "(not root or no iproute2: the runs behind shaped links are left out)"
  exit 0
fi
accuracy() {
  python3 -c "import json; print('%.4f' % json.load(open('$1'))['test_accuracy'])"
}
printf '\n%-40s %12s %8s %10s\n' "behind a link per ps" examples/s accuracy "x float32"
for rate in 1gbit 2gbit; do
  float32=
  for wire in float32 bf16 topk:0.01; do
    case $wire in
      topk:*) flags="--gradient_compression=$wire" ;;
      *) flags="--wire_dtype=$wire" ;;
    esac
    "$build/bin/pstrain" local --ps=2 --workers=2 --mode=async --batch_size=64 \
      --epochs="$epochs" --ps_link_rate="$rate" $flags \
      --summary_json="$out/linked.json" > "$out/linked.log" 2>&1
    linked=$(rate "$out/linked.json")
    [ "$wire" = float32 ] && float32=$linked
    printf '%-40s %12.0f %8s %10.2f\n' "$rate, $wire" "$linked" \
      "$(accuracy "$out/linked.json")" "$(python3 -c "print($linked / $float32)")"
    grep -h "dense payload per step" "$out/linked.log" | head -1 | sed 's/^.*\] /    /'
  done
done
