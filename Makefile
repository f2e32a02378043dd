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
  libgtest-dev dataset-fashion-mnist prometheus-cpp-dev libssl-dev \
  python3-dev pybind11-dev python3-numpy librocksdb-dev
# What only the tests need: iptables (packet loss in the multi-host test),
# openssl (certificates), promtool, clang with libFuzzer, and PyTorch with
# pytest for the Python workers' tests (python/tests).
TEST_PACKAGES := iptables openssl prometheus clang libclang-rt-14-dev \
  python3-torch python3-pytest

.PHONY: all deps test-deps configure build programs demo test test-deploy test-k8s test-compose fuzz fuzz-corpus bench-modes bench-ps bench-recovery bench-throughput bench-python sanitize tsan clean

all: build

deps:
	@tools/install_deps.sh $(DEBIAN_PACKAGES)

test-deps:
	@tools/install_deps.sh $(TEST_PACKAGES)

configure: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

# What a user runs, and nothing else: the daemons, the pstrain CLI and the
# Python package (cmd/, python/). `build` adds ps_bench and every test.
PROGRAMS := ps_server worker chief evaluator pstrain pstrain_python
programs: configure
	cmake --build $(BUILD_DIR) -j$(JOBS) --target $(PROGRAMS)

demo: programs
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
	    ../python.yaml ../tfjob-python.yaml \
	  && node validate.mjs --self-test \
	  && node start_sh_test.mjs $(abspath $(BUILD_DIR))/bin

test-compose:
	deploy/compose_test.sh

# Every training mode with and without a slow worker, side by side.
bench-modes: build
	bench/modes.sh $(BUILD_DIR)

# The data plane against the wire: dense Push, Pull and PushPull and sparse
# row pulls and pushes through real ps processes, beside a loopback TCP
# stream and memcpy measured in the same run, then 1 ps against 2 on
# loopback and behind shaped links (root) (a few minutes on 2 cores).
# BENCH_PS_FLAGS adds ps_bench flags, e.g. BENCH_PS_FLAGS="--ps=1,2 --workers=2".
BENCH_PS_FLAGS ?=
bench-ps: build
	$(BUILD_DIR)/bin/ps_bench --json=$(BUILD_DIR)/ps_bench.json $(BENCH_PS_FLAGS)

# The ps's optimizers per element of a dense push, every one in both forms,
# against the loop the ps ran for Adam before (docs/optimizers.md).
.PHONY: bench-optimizers
bench-optimizers: build
	$(BUILD_DIR)/bin/optimizer_bench --rounds=5

# Bounded hash tables (issue 32): row pushes into a table bounded to a
# quarter of the distinct ids (lru) against the same table unbounded, in
# alternate rounds of one run: rows/s ratio and evictions/s (ps Health);
# the same over 16x the batches (a 7x larger table, out of the CPU caches);
# the same with the rows past the capacity on disk (the disk tier), through
# the ps processes; then the disk tier alone (hash_table_bench, no network,
# Zipf 1.1 ids): wall time per push and per pull against the table with
# every row in memory.
.PHONY: bench-tables
BENCH_TABLES_FLAGS ?=
bench-tables: build
	$(BUILD_DIR)/bin/ps_bench --cases=hash_push,hash_push_evict --ps=2 --workers=2 \
	  --scaling=false --json=$(BUILD_DIR)/bench_tables.json $(BENCH_TABLES_FLAGS)
	$(BUILD_DIR)/bin/ps_bench --cases=hash_push,hash_push_evict --ps=2 --workers=2 \
	  --scaling=false --hash_batches=512 --json=$(BUILD_DIR)/bench_tables_large.json \
	  $(BENCH_TABLES_FLAGS)
	rm -rf $(BUILD_DIR)/bench_table_store
	$(BUILD_DIR)/bin/ps_bench --cases=hash_push,hash_push_evict --ps=2 --workers=2 \
	  --scaling=false --table_store_dir=$(BUILD_DIR)/bench_table_store \
	  --json=$(BUILD_DIR)/bench_tables_disk.json $(BENCH_TABLES_FLAGS)
	rm -rf $(BUILD_DIR)/bench_table_store
	$(BUILD_DIR)/bin/hash_table_bench --table_store_dir=$(BUILD_DIR)/bench_table_store --rounds=3
	rm -rf $(BUILD_DIR)/bench_table_store
	$(BUILD_DIR)/bin/table_save_bench --dir=$(BUILD_DIR)/bench_table_save --rounds=2

# Streamed input (--stream_data) against the same file loaded whole:
# examples/s of a wide_deep cluster in alternate runs, and the workers'
# peak memory.
bench-stream: build
	bench/stream_throughput.sh $(BUILD_DIR)

# Training throughput of a 2 ps + 2 worker cluster (with and without
# --overlap) against one single-threaded process with no network.
bench-throughput: build
	bench/throughput.sh $(BUILD_DIR)

# Python workers: PushPull through the bindings against the C++ client, and
# the CNN example's cluster against one torch process (bench/python_workers.py).
bench-python: build test-deps
	PSTRAIN_BIN=$(abspath $(BUILD_DIR))/bin PYTHONPATH=$(abspath $(BUILD_DIR))/python \
	  /usr/bin/python3 bench/python_workers.py --json=$(BUILD_DIR)/bench_python.json

# Checkpoint and recovery figures: save/restore MB/s, throughput during a
# save, time from a ps kill to resumed training, steps lost; then the
# replicated ps: throughput with and without --ps_replicas=2 (interleaved
# runs) and a failover's times; then what a save's snapshot costs pushes,
# copied against copy-on-write (snapshot_bench); then the bytes an
# incremental checkpoint writes against a full one, and the restores
# (incremental_save_bench).
bench-recovery: build
	bench/recovery.sh $(BUILD_DIR)
	bench/replication.sh $(BUILD_DIR)
	$(BUILD_DIR)/bin/snapshot_bench --dir=$(BUILD_DIR)
	$(BUILD_DIR)/bin/incremental_save_bench --dir=$(BUILD_DIR)/bench_incremental

# The unit and integration tests under AddressSanitizer (leak checks on) and
# UndefinedBehaviorSanitizer, the daemons the tests start included. Built at
# -O1 with debug info and asserts on (no NDEBUG), CPU path only: a Debug build
# is too slow for the training tests on two cores. Every report, also one
# from a daemon whose exit status no test looks at, goes to a file under
# $(SAN_DIR)/san-logs; any such file fails the target. python_tests runs
# pytest with the ASan runtime preloaded into the interpreter, whose leak
# checks alone are off (python/CMakeLists.txt); the daemons and Python
# workers it starts report here too. SAN_EXCLUDE names the tests left out
# (see the note on sanitizers in docs/testing.md). Not part of `make test`.
SAN_DIR ?= build-asan
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_OPT_FLAGS := -O1 -g
SAN_EXCLUDE ?= ^Modes/EveryModeTest\.
SAN_CTEST_FLAGS ?=
sanitize: deps test-deps
	cmake -S . -B $(SAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPST_CUDA=OFF \
	  -DCMAKE_CXX_FLAGS="$(SAN_FLAGS)" -DCMAKE_C_FLAGS="$(SAN_FLAGS)" \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SAN_OPT_FLAGS)" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$(SAN_OPT_FLAGS)" \
	  -DCMAKE_EXE_LINKER_FLAGS="$(SAN_FLAGS)" -DCMAKE_SHARED_LINKER_FLAGS="$(SAN_FLAGS)"
	cmake --build $(SAN_DIR) -j$(JOBS)
	rm -rf $(SAN_DIR)/san-logs && mkdir -p $(SAN_DIR)/san-logs
	cd $(SAN_DIR) && \
	  ASAN_OPTIONS=detect_leaks=1:log_path=$(abspath $(SAN_DIR))/san-logs/asan \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$(abspath $(SAN_DIR))/san-logs/ubsan \
	  ctest --output-on-failure -j$(JOBS) $(if $(SAN_EXCLUDE),-E '$(SAN_EXCLUDE)') $(SAN_CTEST_FLAGS)
	@if ls $(SAN_DIR)/san-logs | grep -q .; then head -n 60 $(SAN_DIR)/san-logs/*; \
	  echo "sanitizer reports in $(SAN_DIR)/san-logs"; exit 1; fi

# The concurrency tests under ThreadSanitizer, in $(TSAN_DIR): the variable
# store (concurrent pushes and pulls, striped row locks), the ps client, sync
# mode, the coordinator, the wire codec, progress, and the ps and cluster
# integration tests with their daemons built with TSan too. Only those
# targets are built, the Python package among them; ctest runs every test
# they hold, python_tests included. Our locks are
# absl::Mutex, which TSan sees only in an instrumented Abseil: Debian's own
# abseil source package (same version, patches and options, so the same
# ABI) is fetched with `apt-get source` and its libraries built with TSan
# into $(TSAN_ABSL)/lib, which LD_LIBRARY_PATH puts before Debian's for the
# tests and the daemons they start. gRPC and protobuf stay uninstrumented:
# tools/tsan.supp may suppress only reports wholly inside them. Reports go
# to $(TSAN_DIR)/san-logs, daemons' too; any fails the target. OpenBLAS runs
# on the calling thread (OPENBLAS_NUM_THREADS=1): its own thread pool hands
# work over in code TSan cannot see. Not part of `make test`.
TSAN_DIR ?= build-tsan
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
TSAN_TARGETS := variable_store_test variable_store_rows_test variable_test sync_ledger_test ps_client_test sync_mode_test \
  coordinator_test wire_codec_test progress_test ps_server_integration_test cluster_integration_test \
  replication_test resync_test store_state_test disk_tier_test hash_row_table_disk_test \
  pstrain_python
TSAN_ABSL = $(abspath $(TSAN_DIR))/absl
ABSL_DEB_VERSION = $(shell dpkg-query -W -f='$${Version}' libabsl-dev)
DEBIAN_CODENAME = $(shell . /etc/os-release && echo $$VERSION_CODENAME)
APT_SRC = -o Dir::Etc::SourceList=$(TSAN_ABSL)/sources.list -o Dir::Etc::SourceParts=/dev/null \
  -o Dir::State::Lists=$(TSAN_ABSL)/lists -o Dir::Cache=$(TSAN_ABSL)/cache -o Debug::NoLocking=1
TSAN_CTEST_FLAGS ?=
# TSan's lock-order checker tracks at most 64 locks held by one thread and
# aborts (CHECK failed: n_all_locks_ < 64) beyond. Whole reads of a variable
# taking striped row pushes used to hold its lock and all 64 stripes; since
# they take the variable's lock alone, no path holds more than a few, but the
# clean runs were made with the checker off, so it stays off by default:
# TSAN_DEADLOCKS=1 turns it on.
TSAN_DEADLOCKS ?= 0
# Left out: TSan runs an asynchronous signal's handler only when the thread
# that took the signal next enters its runtime; pstrain local's threads all
# wait in system calls (waitpid, pipe reads, futexes) that a SIGINT restarts,
# so under TSan Ctrl-C never reaches its handler (nothing printed, no signal
# left pending). SIGTERM to a ps (PsServerTest.Sigterm_*) and SIGKILL to
# the launcher are still run.
# python_tests runs, its extension TSan-built (pstrain_python): each Python
# process starts itself again with TSan's runtime preloaded, and keeps the
# preload from the shells it starts (python/tsan/sitecustomize.py).
TSAN_EXCLUDE ?= ^ClusterTest\.CtrlC_StopsEveryDaemon_AndExits130$$
tsan: deps $(TSAN_DIR)/absl/lib/done
	cmake -S . -B $(TSAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPST_CUDA=OFF \
	  -DCMAKE_CXX_FLAGS="$(TSAN_FLAGS)" -DCMAKE_C_FLAGS="$(TSAN_FLAGS)" \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SAN_OPT_FLAGS)" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$(SAN_OPT_FLAGS)" \
	  -DCMAKE_EXE_LINKER_FLAGS="$(TSAN_FLAGS)" -DCMAKE_SHARED_LINKER_FLAGS="$(TSAN_FLAGS)"
	cmake --build $(TSAN_DIR) -j$(JOBS) --target $(TSAN_TARGETS)
	rm -rf $(TSAN_DIR)/san-logs && mkdir -p $(TSAN_DIR)/san-logs
	cd $(TSAN_DIR) && LD_LIBRARY_PATH=$(TSAN_ABSL)/lib OPENBLAS_NUM_THREADS=1 \
	  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 detect_deadlocks=$(TSAN_DEADLOCKS) suppressions=$(abspath tools/tsan.supp) log_path=$(abspath $(TSAN_DIR))/san-logs/tsan" \
	  ctest --output-on-failure -j$(JOBS) -E '_NOT_BUILT$$$(if $(TSAN_EXCLUDE),|$(TSAN_EXCLUDE))' $(TSAN_CTEST_FLAGS)
	@if ls $(TSAN_DIR)/san-logs | grep -q .; then head -n 80 $(TSAN_DIR)/san-logs/*; \
	  echo "ThreadSanitizer reports in $(TSAN_DIR)/san-logs"; exit 1; fi

$(TSAN_DIR)/absl/lib/done:
	rm -rf $(TSAN_ABSL) && mkdir -p $(TSAN_ABSL)/lists/partial $(TSAN_ABSL)/cache/archives/partial
	printf 'deb-src http://deb.debian.org/debian $(DEBIAN_CODENAME) main\ndeb-src http://deb.debian.org/debian-security $(DEBIAN_CODENAME)-security main\n' \
	  > $(TSAN_ABSL)/sources.list
	apt-get $(APT_SRC) update -qq
	cd $(TSAN_ABSL) && apt-get $(APT_SRC) source --download-only abseil=$(ABSL_DEB_VERSION) \
	  && dpkg-source -x abseil_*.dsc src
	cmake -S $(TSAN_ABSL)/src -B $(TSAN_ABSL)/build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SAN_OPT_FLAGS)" -DCMAKE_CXX_FLAGS="$(TSAN_FLAGS)" \
	  -DCMAKE_SHARED_LINKER_FLAGS="$(TSAN_FLAGS)" -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
	  -DBUILD_TESTING=OFF
	cmake --build $(TSAN_ABSL)/build -j$(JOBS) --target synchronization
	mkdir -p $(TSAN_ABSL)/lib && find $(TSAN_ABSL)/build -name 'libabsl_*.so.*' -exec cp -P {} $(TSAN_ABSL)/lib \;
	touch $@

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR) $(TSAN_DIR)

# libFuzzer targets, built with clang, AddressSanitizer and UBSan in
# $(FUZZ_DIR): the TF_CONFIG parser, the checkpoint shard reader and the
# ps's request handling (fuzz/). Each runs FUZZ_RUNS inputs, or
# FUZZ_SECONDS seconds when that is set (the closing note reports
# 600-second runs), starting from its corpus kept in the repository
# (fuzz/corpus/<target>, where earlier runs reached), the inputs of past
# findings (fuzz/regressions/<target>, replayed by every run) and seeds
# written by fuzz_make_seeds. Those are only read: what a run finds goes to
# $(FUZZ_DIR)/corpus/<target> (libFuzzer writes to the first directory), and
# `make fuzz-corpus` merges it into fuzz/corpus, minimized (-merge=1).
FUZZ_DIR ?= build-fuzz
FUZZ_RUNS ?= 20000
FUZZ_SECONDS ?=
FUZZ_TARGETS := tf_config checkpoint_shard ps_request
FUZZ_FLAGS := -rss_limit_mb=4096 -max_len=65536
FUZZ_SANITIZE := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
define FUZZ_BUILD
cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPST_FUZZ=ON -DPST_CUDA=OFF \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS="$(FUZZ_SANITIZE)" -DCMAKE_CXX_FLAGS="$(FUZZ_SANITIZE)"
cmake --build $(FUZZ_DIR) -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS)) fuzz_make_seeds
endef
fuzz: deps test-deps
	$(FUZZ_BUILD)
	$(FUZZ_DIR)/bin/fuzz_make_seeds $(FUZZ_DIR)/seeds
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$t && \
	  $(FUZZ_DIR)/bin/fuzz_$$t $(FUZZ_FLAGS) -artifact_prefix=$(FUZZ_DIR)/ \
	    $(if $(FUZZ_SECONDS),-max_total_time=$(FUZZ_SECONDS),-runs=$(FUZZ_RUNS)) \
	    $(FUZZ_DIR)/corpus/$$t $$(ls -d fuzz/regressions/$$t fuzz/corpus/$$t 2>/dev/null) \
	    $(FUZZ_DIR)/seeds/$$t || exit 1; \
	done

# Merges what `make fuzz` runs found ($(FUZZ_DIR)/corpus/<target>) with
# fuzz/corpus/<target> into a fresh minimal set, the smallest inputs that
# cover every edge of both (-use_counters=0: edges, not how often each ran,
# which keeps a quarter of the files; a run regains those in seconds), and
# puts it in fuzz/corpus/<target>; commit the result. The inputs of
# fuzz/regressions are kept apart, never merged.
fuzz-corpus: deps test-deps
	$(FUZZ_BUILD)
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz/corpus/$$t $(FUZZ_DIR)/corpus/$$t && rm -rf $(FUZZ_DIR)/merged/$$t && \
	  mkdir -p $(FUZZ_DIR)/merged/$$t && \
	  $(FUZZ_DIR)/bin/fuzz_$$t $(FUZZ_FLAGS) -merge=1 -use_counters=0 $(FUZZ_DIR)/merged/$$t \
	    fuzz/corpus/$$t $(FUZZ_DIR)/corpus/$$t || exit 1; \
	  rm -rf fuzz/corpus/$$t && mv $(FUZZ_DIR)/merged/$$t fuzz/corpus/$$t || exit 1; \
	done
	@for t in $(FUZZ_TARGETS); do \
	  echo "fuzz/corpus/$$t: $$(ls fuzz/corpus/$$t | wc -l) files, $$(cat fuzz/corpus/$$t/* | wc -c) bytes"; \
	done
