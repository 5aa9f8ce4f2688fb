# ncclprof — build, test and benchmark.
#   make          the plugin (its two libraries), ncclmerge, the test host, the empty plugin
#                 (benchmark floor)
#   make demo     the embedded default: a simulated 4-rank job through the real plugin, merged
#   make test     every test (Go, Python, sanitizers); needs no GPU; installs what it lacks first
#                 (tools/deps.sh), or stops at once with the one command to run
#   make wheel    the Python package as a platform wheel (carries the plugin and ncclmerge)
#   make bench    the benchmarks (results go in docs/benchmarks.md)

GO      ?= go
CC      ?= gcc
BUILD   := build
VERSION := 0.1.0

PLUGIN  := $(BUILD)/libnccl-profiler-ncclprof.so
DRAIN   := $(BUILD)/libncclprof-drain.so
HOST    := $(BUILD)/ncclprof-testhost
EMPTY   := $(BUILD)/libnccl-profiler-empty.so
# A plugin that logs every call it gets (NCCLPROF_CHAIN tests), and variants exporting one
# ABI version each or a broken table.
RECORDER := $(BUILD)/libnccl-profiler-recorder.so
RECORDER_VARIANTS := $(foreach v,1 2 3 4 5 6,$(BUILD)/recorder/librecorder-v$(v).so) \
                     $(foreach b,badtable datatable exittable,$(BUILD)/recorder/librecorder-$(b).so)
MERGE   := $(BUILD)/ncclmerge

# The library NCCL loads is every C file of profiler/ (pure C: hot path, ABI tables, control API,
# loader, chaining); drainer/ is the Go drainer library it loads (profiler/drainapi.h).
CORE_SRC := $(wildcard profiler/*.c)
CORE_HDR := $(wildcard profiler/*.h)
HOST_SRC := testhost/main.c testhost/replay.c testhost/emit.c testhost/calllog.c testhost/world.c testhost/scenarios.c \
            testhost/fuzz.c testhost/bench.c testhost/soak.c testhost/skew.c testhost/hang.c \
            testhost/drainbench.c testhost/job.c testhost/races.c testhost/samplebench.c \
            testhost/api_patterns.c testhost/proxy_patterns.c testhost/ncclbench.c testhost/era.c
HOST_HDR := testhost/emit.h testhost/calllog.h testhost/world.h testhost/era.h testhost/scenarios.h profiler/abi.h profiler/core.h
GO_SRC   := $(shell find drainer internal cmd -name '*.go' 2>/dev/null) go.mod $(wildcard go.sum)

WARN     := -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
HOST_CFLAGS := -std=gnu11 -O2 -g $(WARN)

.PHONY: all test test-go test-python deps gocheck bench demo clean sanitize soak otelcol prometheus wheel hta

all: $(PLUGIN) $(DRAIN) $(HOST) $(EMPTY) $(MERGE) $(RECORDER) $(RECORDER_VARIANTS)

# Every Go build first checks that the Go on PATH can build this module (go.mod: go 1.26), and
# says in one line what to do where it cannot (GOTOOLCHAIN=local with an older Go).
gocheck:
	@GO="$(GO)" tools/deps.sh go

# The Go builds say what they do and, every 20 s, how far they are (tools/progress.sh): the first
# build on a machine downloads about 100 modules and compiles them for a minute or two.
PROGRESS := tools/progress.sh

$(MERGE): $(GO_SRC) | gocheck
	@mkdir -p $(BUILD)
	@$(PROGRESS) "building $@ (Go)" "1-2 minutes on 2 cores" $(GO) build -trimpath -o $@ ./cmd/ncclmerge

# Both libraries are built by tools/build/plugin.sh (python/setup.py uses it too).
$(PLUGIN): $(CORE_SRC) $(CORE_HDR) tools/build/plugin.sh
	@mkdir -p $(BUILD)
	@$(PROGRESS) "building $@ (C: the library NCCL loads)" "15 s on 2 cores" env CC=$(CC) tools/build/plugin.sh c $@

$(DRAIN): $(GO_SRC) $(CORE_HDR) tools/build/plugin.sh tools/build/drain.map | gocheck
	@mkdir -p $(BUILD)
	@$(PROGRESS) "building $@ (the Go drainer)" "1-2 minutes on 2 cores" env GO=$(GO) tools/build/plugin.sh go $@

$(HOST): $(HOST_SRC) $(HOST_HDR)
	@mkdir -p $(BUILD)
	@$(PROGRESS) "building $@ (C: the test host that stands in for NCCL)" "20 s on 2 cores" \
	  $(CC) $(HOST_CFLAGS) -o $@ $(HOST_SRC) -ldl -lpthread

$(EMPTY): testhost/empty.c profiler/abi.h
	@mkdir -p $(BUILD)
	$(CC) -std=gnu11 -O2 -fPIC -shared $(WARN) -o $@ $<

REC_SRC := testhost/recorder.c testhost/calllog.c
REC_DEPS := $(REC_SRC) testhost/calllog.h profiler/abi.h
$(RECORDER): $(REC_DEPS)
	@mkdir -p $(BUILD)
	$(CC) -std=gnu11 -O2 -fPIC -shared $(WARN) -o $@ $(REC_SRC) -lpthread
$(BUILD)/recorder/librecorder-v%.so: $(REC_DEPS)
	@mkdir -p $(BUILD)/recorder
	$(CC) -std=gnu11 -O2 -fPIC -shared $(WARN) -Wno-unused-function -DREC_ONLY=$* -o $@ $(REC_SRC) -lpthread
# Broken tables (recorder.c, REC_BAD_TABLE): a NULL pointer, one into data, init = libc's _exit.
REC_BAD_badtable := 1
REC_BAD_datatable := 2
REC_BAD_exittable := 3
$(BUILD)/recorder/librecorder-%table.so: $(REC_DEPS)
	@mkdir -p $(BUILD)/recorder
	$(CC) -std=gnu11 -O2 -fPIC -shared $(WARN) -Wno-unused-function -Wno-nonnull -DREC_BAD_TABLE=$(REC_BAD_$*table) -o $@ $(REC_SRC) -lpthread

# Sanitizer builds: the C core with the C drainer (no Go runtime), and a host built the same.
SAN_SRC := $(CORE_SRC) testhost/cdrain.c
$(BUILD)/asan/libnccl-profiler-ncclprof.so: $(SAN_SRC) $(CORE_HDR)
	@mkdir -p $(BUILD)/asan
	@$(PROGRESS) "building $@ (the C core under AddressSanitizer)" "30 s on 2 cores" \
	  $(CC) -std=gnu11 -O1 -g -fPIC -shared -fsanitize=address,undefined -fno-omit-frame-pointer \
	  -fno-sanitize-recover=undefined $(WARN) -o $@ $(SAN_SRC) -Wl,-z,nodelete -ldl -lpthread
$(BUILD)/asan/ncclprof-testhost: $(HOST_SRC) $(HOST_HDR)
	@mkdir -p $(BUILD)/asan
	@$(PROGRESS) "building $@ (the test host under AddressSanitizer)" "30 s on 2 cores" \
	  $(CC) $(HOST_CFLAGS) -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
	  -fno-sanitize-recover=undefined -o $@ $(HOST_SRC) -ldl -lpthread
$(BUILD)/tsan/libnccl-profiler-ncclprof.so: $(SAN_SRC) $(CORE_HDR)
	@mkdir -p $(BUILD)/tsan
	@$(PROGRESS) "building $@ (the C core under ThreadSanitizer)" "30 s on 2 cores" \
	  $(CC) -std=gnu11 -O1 -g -fPIC -shared -fsanitize=thread -DNP_TSAN $(WARN) -o $@ $(SAN_SRC) -Wl,-z,nodelete -ldl -lpthread
$(BUILD)/tsan/ncclprof-testhost: $(HOST_SRC) $(HOST_HDR)
	@mkdir -p $(BUILD)/tsan
	@$(PROGRESS) "building $@ (the test host under ThreadSanitizer)" "30 s on 2 cores" \
	  $(CC) $(HOST_CFLAGS) -O1 -fsanitize=thread -o $@ $(HOST_SRC) -ldl -lpthread

sanitize: $(BUILD)/asan/libnccl-profiler-ncclprof.so $(BUILD)/asan/ncclprof-testhost \
          $(BUILD)/tsan/libnccl-profiler-ncclprof.so $(BUILD)/tsan/ncclprof-testhost

# Seconds each sanitizer fuzz run lasts in `make test` (per ABI version tried). Packages are
# tested one at a time (-p 1): several of them run the test host, whose threads spin like
# NCCL's, and on a small machine two at once starve each other's plugin drainer.
FUZZ_SECONDS ?= 4

# The OpenTelemetry Collector the end-to-end metrics tests export to, built once with the
# collector's builder (pinned in tools/otelcol/build.sh) and cached under ~/.cache/ncclprof.
otelcol:
	@tools/otelcol/build.sh >/dev/null

# Prometheus 3.x for the metrics example's test (internal/telemetry TestPrometheusExample), built
# once from the module proxy (pinned in tools/prometheus/build.sh), cached like the collector.
# The test also runs Debian's Prometheus 2.x, which tools/deps.sh installs (apt-get install prometheus).
prometheus:
	@tools/prometheus/build.sh >/dev/null

# What the tests need beyond Go, gcc and make (Chromium, speedscope, Debian's Prometheus, the
# collector), installed where missing; see tools/deps.sh.
deps:
	@GO="$(GO)" PYTHON="$(PYTHON)" tools/deps.sh

# Both suites run whatever the other's result; every failure is reported and the exit is non-zero.
test: deps
	@failed=; \
	$(MAKE) --no-print-directory test-go || failed="$$failed test-go"; \
	$(MAKE) --no-print-directory test-python || failed="$$failed test-python"; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed (each failure is reported above)" >&2; exit 1; fi; \
	echo "make test: every test passed"

# HTA (HolisticTraceAnalysis 0.5.0) with pandas 2 and with pandas 3, made once under build/ by
# tools/hta/venv.sh: the merge's per-rank output must load in both (internal/merge hta_test.go).
hta:
	@PYTHON=$(PYTHON) tools/hta/venv.sh $(BUILD)

# go test's JSON through tools/testprogress: a line as each package starts and ends, every 30 s
# what a long one is doing, skipped tests with their reasons, failed tests in full. Its status
# and go test's are both kept (no pipefail in sh).
TESTPROGRESS := $(BUILD)/testprogress
$(TESTPROGRESS): tools/testprogress/main.go | gocheck
	@mkdir -p $(BUILD)
	$(GO) build -o $@ ./tools/testprogress

test-go: all sanitize otelcol prometheus hta $(TESTPROGRESS)
	@echo "go test: every package, one at a time (about 20 minutes on 2 cores)"
	@rc=$(BUILD)/go-test.rc; \
	{ NCCLPROF_FUZZ_SECONDS=$(FUZZ_SECONDS) $(GO) test -json -count=1 -p 1 -timeout 30m ./... 2>&1; echo $$? >$$rc; } | \
	  $(TESTPROGRESS) -packages $$($(GO) list ./... | wc -l); s=$$?; [ $$s = 0 ] && [ "$$(cat $$rc)" = 0 ]

# The Python package, built from this checkout and installed into build/py (made by
# tools/python/venv.sh, with the newest torch it is tested with when the disk has room; torch
# itself is installed once per machine under ~/.cache/ncclprof and shared by every clone), then
# its tests; then the torch tests again in build/py-torch<v>, with the oldest torch the package
# supports (docs/python.md#torch-versions).
PYTHON ?= python3
PYENV  := $(BUILD)/py
TORCH_NEWEST := 2.15.0
TORCH_OLDEST := 2.7.0
PYENV_OLDEST := $(BUILD)/py-torch$(basename $(TORCH_OLDEST))
PYWHEEL := $(BUILD)/pywheel
test-python: all
	@PYTHON=$(PYTHON) tools/python/venv.sh $(PYENV) torch==$(TORCH_NEWEST)
	@PYTHON=$(PYTHON) tools/python/venv.sh $(PYENV_OLDEST) torch==$(TORCH_OLDEST)
	@rm -rf $(PYWHEEL)
	$(PYENV)/bin/pip wheel -q --disable-pip-version-check --no-deps --wheel-dir $(PYWHEEL) ./python
	@rm -rf python/build python/ncclprof.egg-info
	for env in $(PYENV) $(PYENV_OLDEST); do \
	  $$env/bin/pip install -q --disable-pip-version-check --force-reinstall --no-deps $(PYWHEEL)/*.whl || exit 1; done
	NCCLPROF_TEST_NO_TORCH="$$(cat $(PYENV)/no-torch 2>/dev/null)" $(PYENV)/bin/python -m pytest -q -rs python/tests
	NCCLPROF_TEST_NO_TORCH="$$(cat $(PYENV_OLDEST)/no-torch 2>/dev/null)" $(PYENV_OLDEST)/bin/python -m pytest -q -rs \
	  python/tests/test_torch.py python/tests/test_torch_dropin.py

# A platform wheel (linux x86_64 or aarch64, glibc) that installs without Go.
# Cross: make wheel GOARCH=arm64 CC=aarch64-linux-gnu-gcc
wheel:
	@rm -rf $(BUILD)/wheel python/build
	CC=$(CC) $(if $(GOARCH),GOARCH=$(GOARCH)) $(PYTHON) -m pip wheel --no-deps --wheel-dir $(BUILD)/wheel ./python
	@rm -rf python/build python/ncclprof.egg-info
	@ls -1 $(BUILD)/wheel/*.whl

# The real traces the tests use, one shape each (relative µs, absolute µs with SendRecv,
# sampled absolute µs, driver-API launches, CPU only), and the shapes internal/synth makes
# (one NCCL kernel per 10 kernels, per 200, profile_memory, ROCm, absolute µs, ns; issue 26's V100
# profile_memory DDP job, every other kernel a small collective, 64 process groups, with_stack).
BENCH_TRACES := $(addprefix testdata/kineto/,nccl_parser_config_nccl_data.json.gz \
  negative_queue_length_values_check_rank0.json.gz trace_filter_sampled_rank-0.json.gz \
  triton_example_triton_example.json.gz cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz) \
  synth:nccl-heavy synth:kernel-heavy synth:memory synth:rocm synth:absolute-us synth:ns \
  synth:v100-memory synth:small-nccl synth:many-pg synth:stack

bench: all hta
	@echo "== plugin callback cost (testhost bench, median of 7 runs) =="
	@rm -rf $(BUILD)/bench-out
	NCCLPROF_OUTPUT_DIR=$(BUILD)/bench-out NCCLPROF_BENCH_TRACE_DIR=$(BUILD)/bench-out/trace \
	  $(HOST) --lib $(PLUGIN) --empty-lib $(EMPTY) --reps 7 bench
	@rm -rf $(BUILD)/bench-out/trace
	@echo "== sampled tracing (NCCLPROF_TRACE_SAMPLE=N): callback cost at N = 1, 100, 10000 against metrics only, and trace bytes per operation =="
	NCCLPROF_OUTPUT_DIR=$(BUILD)/bench-out/sample $(HOST) --lib $(PLUGIN) --empty-lib $(EMPTY) --reps 7 bench-sample
	@rm -rf $(BUILD)/bench-out/sample
	@echo "== the same with the empty plugin chained behind ncclprof (NCCLPROF_CHAIN) =="
	NCCLPROF_OUTPUT_DIR=$(BUILD)/bench-out $(HOST) --lib $(PLUGIN) --empty-lib $(EMPTY) --chain $(EMPTY) --reps 7 bench
	@echo "== callback cost on NCCL's call sequence, drainer live, paced and unpaced (tools/bench/nccl.sh) =="
	@tools/bench/nccl.sh $(HOST) $(PLUGIN) $(EMPTY) $(BUILD)/bench-nccl 7
	@echo "== the drainer under NCCL's busiest load: paced and unpaced, several shapes (tools/bench/drain.sh) =="
	@tools/bench/drain.sh $(HOST) $(PLUGIN) $(BUILD)/bench-drain
	@echo "== callback cost while something is broken (ncclprof, every event type, 1 thread) =="
	@tools/bench/faults.sh $(HOST) $(PLUGIN) $(EMPTY) $(BUILD)/bench-faults 7
	@echo "== ncclmerge per trace shape (512 MiB each): plain read, merge, HTA's parser =="
	$(MERGE) bench --size 512MiB --python $(BUILD)/hta-pandas3/bin/python $(foreach t,$(BENCH_TRACES),--source $(t))
	@echo "== ncclmerge why over merged traces (plugin detail + torch.profiler compute), 16 x 2000 and 8 x 1000 =="
	$(MERGE) bench --what why --ranks 16 --ops 2000 --reps 3
	@echo "== ncclmerge hang over 1024 ranks' in-flight dumps (absent, gpu, link), 8 and 32 channels =="
	$(MERGE) bench --what hang --ranks 1024 --testhost $(HOST)
	$(MERGE) bench --what hang --ranks 1024 --channels 32 --testhost $(HOST)

# Ten minutes of 64 communicators created and destroyed in cycles at full callback rate; prints
# a JSON line a second (rss_kib, threads, fds, goroutines must stay flat) and fails if they grow.
SOAK_SECONDS ?= 600
soak: all
	NCCLPROF_SOAK_SECONDS=$(SOAK_SECONDS) NCCLPROF_SOAK_COMMS=64 $(GO) test -count=1 -v -run TestSoakShort -timeout 30m ./internal/hosttest

# The embedded default: four simulated ranks through the real plugin, their traces merged with
# synthesized torch.profiler traces into one timeline; no GPU, no collector. It builds only what
# it runs (not the benchmark floor or the recording plugins `make` also builds).
demo: $(PLUGIN) $(DRAIN) $(HOST) $(MERGE)
	$(MERGE) demo --dir $(BUILD)/demo

clean:
	rm -rf $(BUILD)
