#!/bin/bash
# The compose test: builds the images from deploy/Dockerfile (the default
# target, pstrain, and --target python, pstrain-python), then
# - brings up deploy/docker-compose.yml unchanged (2 worker replicas that
#   claim their indices), kills one ps and one worker container
#   mid-training, and checks that the job still finishes with the expected
#   accuracy, that every container exits 0, and that the killed replica got
#   its index back;
# - brings up deploy/docker-compose.python.yml (a chief and 2 ps, 2 Python
#   workers training the CNN example) for one epoch (PSTRAIN_EPOCHS=1), and
#   checks that every container exits 0, unrestarted, that the chief counted
#   the epoch's examples and no worker leaving early, that each worker
#   trained on its half, and the test accuracy of the final checkpoint
#   (exported and scored in the python image). PSTRAIN_COMPOSE_PYTHON=0 leaves this job out (not the
#   image).
#
# It installs docker.io and docker-compose when missing and starts dockerd.
# Where no registry can be reached, debian:bookworm-slim is made from a
# debootstrap'ed minbase rootfs (cached in $PSTRAIN_ROOTFS_CACHE).
# Where the machine cannot run a Docker engine at all (no root, no
# cgroups), it says so and exits 0 without testing, unless
# PSTRAIN_REQUIRE_DOCKER=1.
set -euo pipefail
cd "$(dirname "$0")/.."

PROJECT=pstrain_composetest
COMPOSE_FILE=deploy/docker-compose.yml
PYTHON_PROJECT=pstrain_composetest_python
PYTHON_COMPOSE_FILE=deploy/docker-compose.python.yml
ROOTFS_CACHE=${PSTRAIN_ROOTFS_CACHE:-/var/cache/pstrain/bookworm-minbase.tar}
JOB_TIMEOUT_S=${PSTRAIN_COMPOSE_TIMEOUT_S:-600}
LOG_DIR=$(mktemp -d /tmp/pstrain-compose.XXXXXX)
START=$(date +%s)

say() { echo "compose test [$(( $(date +%s) - START ))s]: $*"; }
skip() {
  if [ "${PSTRAIN_REQUIRE_DOCKER:-0}" = 1 ]; then say "FAILED: $*"; exit 1; fi
  say "SKIPPED: $*"; exit 0
}

# ---- An engine.
if [ "$(id -u)" != 0 ] && ! docker info >/dev/null 2>&1; then
  skip "not root and no usable Docker engine"
fi
missing=""
command -v dockerd >/dev/null || missing="$missing docker.io"
command -v docker-compose >/dev/null || missing="$missing docker-compose"
command -v debootstrap >/dev/null || missing="$missing debootstrap"
if [ -n "$missing" ]; then
  say "installing$missing"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >"$LOG_DIR/apt.log" 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive \
         apt-get install -y -q $missing >"$LOG_DIR/apt.log" 2>&1; } \
    || skip "cannot install$missing (see $LOG_DIR/apt.log)"
fi
DOCKER=/usr/bin/docker  # Debian's client, matching its engine
[ -x "$DOCKER" ] || DOCKER=docker
if ! $DOCKER info >/dev/null 2>&1; then
  say "starting dockerd"
  (setsid dockerd >"$LOG_DIR/dockerd.log" 2>&1 &)
  for _ in $(seq 1 60); do $DOCKER info >/dev/null 2>&1 && break; sleep 1; done
  $DOCKER info >/dev/null 2>&1 || skip "dockerd did not start: $(tail -3 "$LOG_DIR/dockerd.log")"
fi

# ---- debian:bookworm-slim: pulled, or made with debootstrap.
if ! $DOCKER image inspect debian:bookworm-slim >/dev/null 2>&1; then
  if ! timeout 60 $DOCKER pull -q debian:bookworm-slim >/dev/null 2>&1; then
    if [ ! -s "$ROOTFS_CACHE" ]; then
      say "no registry: debootstrap --variant=minbase bookworm"
      mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
      rootfs=$(mktemp -d /tmp/pstrain-rootfs.XXXXXX)
      debootstrap --variant=minbase bookworm "$rootfs" "${mirror:-http://deb.debian.org/debian}" \
        >"$LOG_DIR/debootstrap.log" 2>&1 || { tail -5 "$LOG_DIR/debootstrap.log"; exit 1; }
      mkdir -p "$(dirname "$ROOTFS_CACHE")"
      tar -C "$rootfs" -cf "$ROOTFS_CACHE.tmp" . && mv "$ROOTFS_CACHE.tmp" "$ROOTFS_CACHE"
      rm -rf "$rootfs"
    fi
    $DOCKER import "$ROOTFS_CACHE" debian:bookworm-slim >/dev/null
  fi
fi

# ---- The images. Debian's docker.io builds with the legacy builder, which
# builds every stage before the default target, so the python stage is
# built by the first command and the second only tags it (BuildKit would
# build it in the second).
image_size() { $DOCKER image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1/1e6}'; }
say "docker build -f deploy/Dockerfile -t pstrain ."
if ! $DOCKER build -f deploy/Dockerfile -t pstrain . >"$LOG_DIR/build.log" 2>&1; then
  tail -30 "$LOG_DIR/build.log"; say "FAILED: the image did not build"; exit 1
fi
say "image built ($(image_size pstrain))"
# The default target is the CPU image: no Python in it.
if $DOCKER run --rm --entrypoint /bin/sh pstrain -c 'test -e /usr/bin/python3'; then
  say "FAILED: the default target has /usr/bin/python3: it is not the CPU image"; exit 1
fi
say "docker build -f deploy/Dockerfile --target python -t pstrain-python ."
if ! $DOCKER build -f deploy/Dockerfile --target python -t pstrain-python . \
     >"$LOG_DIR/build-python.log" 2>&1; then
  tail -30 "$LOG_DIR/build-python.log"; say "FAILED: the python image did not build"; exit 1
fi
say "python image built ($(image_size pstrain-python))"

# ---- The job.
compose() { docker-compose -p "$PROJECT" -f "$COMPOSE_FILE" "$@"; }
# Waits for `docker-compose up` (pid $UP) and returns its status; past
# JOB_TIMEOUT_S it stops it first with SIGTERM, on which compose stops the
# containers (SIGINT would not do: a background job ignores it).
wait_for_up() {
  if ! timeout "$JOB_TIMEOUT_S" tail --pid=$UP -f /dev/null; then
    say "the job ran past ${JOB_TIMEOUT_S} s: stopping it"
    kill -TERM $UP
  fi
  wait $UP
}
cleanup() {
  compose logs --no-color >"$LOG_DIR/compose-$PROJECT.log" 2>&1 || true
  compose down -v --remove-orphans >/dev/null 2>&1 || true
}
trap cleanup EXIT
compose down -v --remove-orphans >/dev/null 2>&1 || true
say "docker-compose up --exit-code-from chief"
compose up --exit-code-from chief >"$LOG_DIR/up.log" 2>&1 &
UP=$!

# A service's container ids (a worker has one per replica) once they exist,
# and the PID of a container's init on this host. Docker's own client, by
# compose's labels: docker-compose (Python) takes seconds a call while the
# job has both cores, and the kill must land while training goes on.
containers() {
  $DOCKER ps -aq --no-trunc --filter "label=com.docker.compose.project=$PROJECT" \
    --filter "label=com.docker.compose.service=$1" 2>/dev/null | sort
}
host_pid() { $DOCKER inspect -f '{{.State.Pid}}' "$1"; }
wait_for_log() {  # service, pattern, seconds
  local deadline=$(( $(date +%s) + $3 )) id
  while [ "$(date +%s)" -lt "$deadline" ]; do
    for id in $(containers "$1"); do
      $DOCKER logs "$id" 2>&1 | grep -q -- "$2" && return 0
    done
    kill -0 $UP 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

# Mid-training: after the first checkpoint, kill ps-1 and one worker
# replica the way a crash would (SIGKILL to the container's init from the
# host: `docker kill` would count as a manual stop and switch the restart
# policy off).
wait_for_log chief "saved checkpoint" 300 || { tail -40 "$LOG_DIR/up.log"; say "FAILED: no checkpoint"; exit 1; }
KILLED_PS=$(containers ps-1)
KILLED_WORKER=$(containers worker | sed -n 1p)  # sed reads it all: no SIGPIPE
say "training under way; killing ps-1 and worker replica ${KILLED_WORKER:0:12}"
kill -9 "$(host_pid "$KILLED_PS")" "$(host_pid "$KILLED_WORKER")"
if $DOCKER logs "$(containers chief)" 2>&1 | grep -q "workers 2/2 done"; then
  say "FAILED: training had ended before the kill landed: the test did not kill mid-training"
  exit 1
fi

set +e
wait_for_up
UP_STATUS=$?
set -e
say "docker-compose up exited $UP_STATUS"

failed=0
workers=0
for service in chief ps-0 ps-1 worker; do
  for id in $(containers "$service"); do
    code=$($DOCKER inspect -f '{{.State.ExitCode}}' "$id")
    restarts=$($DOCKER inspect -f '{{.RestartCount}}' "$id")
    say "$service ${id:0:12} exited $code after $restarts restart(s)"
    [ "$code" = 0 ] || failed=1
    if [ "$id" = "$KILLED_PS" ] || [ "$id" = "$KILLED_WORKER" ]; then
      [ "$restarts" -ge 1 ] || { say "${id:0:12} was not restarted"; failed=1; }
    fi
    [ "$service" = worker ] && workers=$((workers + 1))
  done
done
# Each replica claimed an index of its own, and the killed one got its own
# back when it restarted.
[ "$workers" = 2 ] || { say "expected 2 worker replicas, found $workers"; failed=1; }
claims=$($DOCKER logs "$KILLED_WORKER" 2>&1 | grep -o 'claimed worker index [0-9]* of 2' | sort | uniq -c)
say "the killed replica's claims: $(echo $claims)"
[ "$(echo "$claims" | wc -l)" = 1 ] && [ "$(echo $claims | cut -d' ' -f1)" -ge 2 ] \
  || { say "the restarted replica did not get its index back"; failed=1; }
indices=$(for id in $(containers worker); do $DOCKER logs "$id" 2>&1 | grep -o 'claimed worker index [0-9]*' | tail -1; done | sort -u | wc -l)
[ "$indices" = 2 ] || { say "the replicas did not claim 2 distinct indices"; failed=1; }
summary=$($DOCKER run --rm -v "${PROJECT}_checkpoints:/checkpoints" --entrypoint cat pstrain \
          /checkpoints/summary.json 2>/dev/null || true)
accuracy=$(echo "$summary" | python3 -c 'import json,sys; print(json.load(sys.stdin)["test_accuracy"])' 2>/dev/null || echo 0)
recoveries=$(echo "$summary" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["recoveries"]))' 2>/dev/null || echo 0)
say "test accuracy $accuracy, $recoveries recovery(ies)"
python3 -c "import sys; sys.exit(0 if float('$accuracy') >= 0.80 else 1)" || { say "accuracy below 0.80"; failed=1; }
[ "$recoveries" -ge 1 ] || { say "the chief recorded no recovery of the killed ps"; failed=1; }
[ "$UP_STATUS" = 0 ] || failed=1
if [ "$failed" != 0 ]; then
  cleanup
  # The chief's lines say why the job ended; the last lines, what came after.
  echo "--- the chief's last lines:"; grep -a 'chief_1 ' "$LOG_DIR/up.log" | tail -25
  echo "--- the last lines of docker-compose up:"; tail -30 "$LOG_DIR/up.log"
  say "FAILED (logs in $LOG_DIR)"; exit 1
fi
cleanup
CPP_DONE=$(date +%s)
say "the C++ job passed"
if [ "${PSTRAIN_COMPOSE_PYTHON:-1}" = 0 ]; then
  say "PASSED in $(( $(date +%s) - START )) s (the Python job left out)"; exit 0
fi

# ---- Python workers: docker-compose.python.yml for one epoch. Not `up
# --exit-code-from chief`: that stops every container when the chief exits,
# and a Python worker scores its model after the chief has ended the job,
# so `up` runs until every container has exited, and each one's status is
# checked.
PROJECT=$PYTHON_PROJECT
COMPOSE_FILE=$PYTHON_COMPOSE_FILE
compose down -v --remove-orphans >/dev/null 2>&1 || true
say "PSTRAIN_EPOCHS=1 docker-compose -f $COMPOSE_FILE up"
PSTRAIN_EPOCHS=1 compose up >"$LOG_DIR/up-python.log" 2>&1 &
UP=$!
set +e
wait_for_up
UP_STATUS=$?
set -e
say "docker-compose up exited $UP_STATUS"

failed=0
for service in chief ps-0 ps-1 worker-0 worker-1; do
  ids=$(containers "$service")
  [ -n "$ids" ] || { say "no $service container"; failed=1; }
  for id in $ids; do
    running=$($DOCKER inspect -f '{{.State.Running}}' "$id")
    code=$($DOCKER inspect -f '{{.State.ExitCode}}' "$id")
    restarts=$($DOCKER inspect -f '{{.RestartCount}}' "$id")
    say "$service ${id:0:12} exited $code after $restarts restart(s)"
    [ "$running" = false ] || { say "$service is still running"; failed=1; }
    [ "$code" = 0 ] && [ "$restarts" = 0 ] || failed=1
  done
done
# The job's figures: the chief's summary and each worker's result file.
read_volume() {
  $DOCKER run --rm -v "${PROJECT}_checkpoints:/checkpoints" --entrypoint cat pstrain-python \
    "/checkpoints/$1" 2>/dev/null || true
}
summary=$(read_volume summary.json)
figures=$(echo "$summary" | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["examples"], s["workers_left_early"], s["global_step"])' 2>/dev/null || echo "0 -1 0")
read -r examples left_early global_step <<<"$figures"
say "the chief: $examples examples, global step $global_step, $left_early worker(s) left early"
[ "$examples" -ge 60000 ] || { say "fewer examples than one epoch of Fashion-MNIST (60000)"; failed=1; }
[ "$left_early" = 0 ] || { say "a worker left before finishing"; failed=1; }
for w in 0 1; do
  trained=$(read_volume "result-$w.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["examples"])' 2>/dev/null || echo 0)
  say "worker $w: trained on $trained examples"
  [ "$trained" -ge 29000 ] || { say "worker $w: not its half of the epoch"; failed=1; }
done
# The model the job trained: the final checkpoint, exported and scored.
score='import sys; sys.path.insert(0, "/opt/pstrain/examples")
import fashion_mnist, pstrain.torch, torch_cnn_fashion_mnist as example
model = example.Cnn()
pstrain.torch.load_safetensors(model, "/tmp/cnn.safetensors")
print(example.accuracy(model, *fashion_mnist.load("t10k")))'
final=$($DOCKER run --rm -v "${PROJECT}_checkpoints:/checkpoints" -e SCORE="$score" pstrain-python \
          /bin/sh -c 'pstrain checkpoint export /checkpoints /tmp/cnn.safetensors && python3 -c "$SCORE"' \
          2>"$LOG_DIR/score.log" | tail -1 || true)
say "the final checkpoint: test accuracy ${final:-none}"
python3 -c "import sys; sys.exit(0 if float('${final:-0}') >= 0.80 else 1)" 2>/dev/null \
  || { say "the final checkpoint's test accuracy is not 0.80 or more (see $LOG_DIR/score.log)"; failed=1; }
if [ "$failed" != 0 ]; then
  cleanup
  echo "--- the last lines of docker-compose up:"; tail -40 "$LOG_DIR/up-python.log"
  say "FAILED (logs in $LOG_DIR)"; exit 1
fi
say "the Python job passed in $(( $(date +%s) - CPP_DONE )) s"
say "PASSED in $(( $(date +%s) - START )) s"
