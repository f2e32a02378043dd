# The two commands: `make demo` (install, build, train on Fashion-MNIST) and
# `make test` (install, build, run every test). Both install whatever Debian
# packages are missing first.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
DEMO_FLAGS ?= --ps=2 --workers=2 --epochs=3

DEBIAN_PACKAGES := cmake make g++ pkg-config ccache \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libabsl-dev libspdlog-dev libopenblas-dev nlohmann-json3-dev zlib1g-dev \
  libgtest-dev dataset-fashion-mnist prometheus-cpp-dev
# What only the tests need: iptables (packet loss in the multi-host test),
# openssl (certificates), promtool, clang with libFuzzer.
TEST_PACKAGES := iptables openssl prometheus clang libclang-rt-14-dev

.PHONY: all deps test-deps configure build demo test test-deploy test-k8s test-compose fuzz bench-modes bench-ps bench-recovery bench-throughput sanitize clean

all: build

deps:
	@tools/install_deps.sh $(DEBIAN_PACKAGES)

test-deps:
	@tools/install_deps.sh $(TEST_PACKAGES)

configure: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

demo: build
	$(BUILD_DIR)/bin/pstrain local $(DEMO_FLAGS) --summary_json=$(BUILD_DIR)/demo_summary.json
	@echo "summary: $(BUILD_DIR)/demo_summary.json"; cat $(BUILD_DIR)/demo_summary.json

test: build test-deps
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)
	$(MAKE) fuzz
	$(MAKE) test-deploy

# The deployment files: the Kubernetes manifests checked offline against
# their schemas, and the compose test (a real Docker engine, installed and
# started when missing; see deploy/compose_test.sh). Part of `make test`.
test-deploy: test-k8s test-compose

test-k8s: build
	cd deploy/k8s/validate && npm ci --no-audit --no-fund --loglevel=error \
	  && node validate.mjs ../tfjob.yaml ../plain.yaml ../checkpoints-pvc.yaml \
	  && node validate.mjs --self-test \
	  && node start_sh_test.mjs $(abspath $(BUILD_DIR))/bin

test-compose:
	deploy/compose_test.sh

# Every training mode with and without a slow worker, side by side.
bench-modes: build
	bench/modes.sh $(BUILD_DIR)

# The data plane against the wire: dense Push, Pull and PushPull and sparse
# row pulls and pushes through real ps processes, beside a loopback TCP
# stream and memcpy measured in the same run (a few minutes on 2 cores).
# BENCH_PS_FLAGS adds ps_bench flags, e.g. BENCH_PS_FLAGS="--ps=1,2 --workers=2".
BENCH_PS_FLAGS ?=
bench-ps: build
	$(BUILD_DIR)/bin/ps_bench --json=$(BUILD_DIR)/ps_bench.json $(BENCH_PS_FLAGS)

# Training throughput of a 2 ps + 2 worker cluster (with and without
# --overlap) against one single-threaded process with no network.
bench-throughput: build
	bench/throughput.sh $(BUILD_DIR)

# Checkpoint and recovery figures: save/restore MB/s, throughput during a
# save, time from a ps kill to resumed training, steps lost.
bench-recovery: build
	bench/recovery.sh $(BUILD_DIR)

# The unit and integration tests under AddressSanitizer (leaks included) and
# UndefinedBehaviorSanitizer, daemons too. Not part of `make test`: it
# takes about ten minutes on two cores.
SAN_DIR ?= build-asan
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
sanitize: deps
	cmake -S . -B $(SAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="$(SAN_FLAGS)" \
	  -DCMAKE_EXE_LINKER_FLAGS="$(SAN_FLAGS)"
	cmake --build $(SAN_DIR) -j$(JOBS)
	cd $(SAN_DIR) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j$(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR)

# libFuzzer targets, built with clang, AddressSanitizer and UBSan in
# $(FUZZ_DIR): the TF_CONFIG parser, the checkpoint shard reader and the
# ps's request handling (fuzz/). Each starts from seeds written by
# fuzz_make_seeds and runs FUZZ_RUNS inputs, or FUZZ_SECONDS seconds when
# that is set (the closing note reports 600-second runs).
FUZZ_DIR ?= build-fuzz
FUZZ_RUNS ?= 20000
FUZZ_SECONDS ?=
FUZZ_SANITIZE := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
fuzz: deps test-deps
	cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPST_FUZZ=ON -DPST_CUDA=OFF \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_C_FLAGS="$(FUZZ_SANITIZE)" -DCMAKE_CXX_FLAGS="$(FUZZ_SANITIZE)"
	cmake --build $(FUZZ_DIR) -j$(JOBS) --target fuzz_tf_config fuzz_checkpoint_shard \
	  fuzz_ps_request fuzz_make_seeds
	$(FUZZ_DIR)/bin/fuzz_make_seeds $(FUZZ_DIR)/seeds
	for t in tf_config checkpoint_shard ps_request; do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$t && \
	  $(FUZZ_DIR)/bin/fuzz_$$t -rss_limit_mb=4096 -max_len=65536 -artifact_prefix=$(FUZZ_DIR)/ \
	    $(if $(FUZZ_SECONDS),-max_total_time=$(FUZZ_SECONDS),-runs=$(FUZZ_RUNS)) \
	    $(FUZZ_DIR)/corpus/$$t $(FUZZ_DIR)/seeds/$$t || exit 1; \
	done
