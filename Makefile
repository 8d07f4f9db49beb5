# gpumeter: `make demo` runs the main job, `make test` passes the tests. Both do the set-up themselves: the
# demo only its own share of it (scripts/setup.sh demo), the tests all of it.
BUILD      ?= build
SAN_BUILD  ?= build-san
JOBS       ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup build san asan test test-unit test-asan fuzz fuzz-check soak bench accuracy demo package image \
        format tidy clean phase-build phase-tests phase-lint phase-tidy phase-san phase-test-asan phase-fuzz-check

all: build

setup:
	@scripts/setup.sh

CONFIGURE = cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUMETER_WERROR=ON \
            $(CMAKE_FLAGS)

build: setup
	@$(MAKE) --no-print-directory phase-build

phase-build:
	@$(CONFIGURE) -DGPUMETER_TESTS=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# One sanitized build serves the sanitizer test run and the fuzz targets (a fresh machine compiles the
# project twice, not three times): clang-14 with ASan + UBSan and libFuzzer's coverage instrumentation.
# (CMakeLists.txt turns clang's function-type check off there, see the comment). Warnings are gated by the gcc
# build (-Werror there); clang's extra ones are not fatal here.
SAN_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
san: setup
	@$(MAKE) --no-print-directory phase-san

phase-san:
	@CC=clang-14 CXX=clang++-14 cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DGPUMETER_TESTS=ON -DGPUMETER_SANITIZE=ON -DGPUMETER_FUZZ=ON -DGPUMETER_UNITY_CORE=ON \
	  "-DCMAKE_CXX_FLAGS=$(SAN_FLAGS)" >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS) --target gpumeter_tests gpumeter fake_nvml \
	  $$(for f in fuzz/*.cpp; do basename $$f .cpp; done)

asan: san

# Everything, phase by phase, each one timed (scripts/phases.sh prints the wall time of each and a summary):
# set-up; the build; the checks of the source (lint: module layers, JSON access); unit, integration and
# gpu-labelled tests (gpu tests skip without a GPU) and, at the same time at the lowest priority, clang-tidy
# (the tests mostly wait on the jobs they meter: tidy takes the idle CPU); the sanitized build; the unit
# tests and the agent fault tests (ASAN_INTEGRATION) again under ASan+UBSan; the deterministic fuzz check.
# Stops at the first failing phase.
test:
	@scripts/phases.sh \
	  "set-up"          "$(MAKE) --no-print-directory setup" \
	  "build"           "$(MAKE) --no-print-directory phase-build" \
	  "lint"            "$(MAKE) --no-print-directory phase-lint" \
	  "tests + tidy"    "scripts/together.sh tests '$(MAKE) --no-print-directory phase-tests' \
	                       tidy 'nice -n 19 $(MAKE) --no-print-directory phase-tidy'" \
	  "sanitizer build" "$(MAKE) --no-print-directory phase-san" \
	  "sanitizer tests" "$(MAKE) --no-print-directory phase-test-asan" \
	  "fuzz"            "$(MAKE) --no-print-directory phase-fuzz-check"

phase-tests:
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE 'bench|lint'

phase-lint:
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L lint

test-unit: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L unit

# Integration tests that run the sanitized binary: the agent under faults (lost GPU, hung calls, missing
# symbols, process churn, TLS, malformed answers of outside services) must exit 0 on SIGTERM with no
# ASan/LSan/UBSan report.
ASAN_INTEGRATION ?= ^Agent(Cli|Mig|PodResources|HttpRobustness|MalformedInput)IntegrationTest\.
test-asan: san
	@$(MAKE) --no-print-directory phase-test-asan

phase-test-asan:
	@cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -L unit
	@cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -R '$(ASAN_INTEGRATION)'

# libFuzzer targets under fuzz/ (one per parser of outside input, see docs/reliability.md), built in the
# sanitized build, JOBS at a time; a crash, hang, sanitizer report or leak fails them.
# `make fuzz`: random exploration, FUZZ_SECONDS per target (19 targets, 30 s, 2 cores: 5 minutes), growing
# the build-local corpus $(SAN_BUILD)/corpus-<target>; longer: make fuzz FUZZ_SECONDS=600. A crash it finds
# goes into fuzz/corpus/<target>/ with its fix (docs/reliability.md).
# `make fuzz-check` (the fuzz phase of `make test`): deterministic, the checked-in corpus replayed, then a
# fixed seed (FUZZ_SEED) for the fixed runs of fuzz/runs.txt: the same commit gives the same result.
FUZZ_SECONDS ?= 30
FUZZ_SEED ?= 1
fuzz: san
	@scripts/fuzz.sh $(SAN_BUILD) explore $(JOBS) $(FUZZ_SECONDS)

fuzz-check: san
	@$(MAKE) --no-print-directory phase-fuzz-check

phase-fuzz-check:
	@FUZZ_SEED=$(FUZZ_SEED) scripts/fuzz.sh $(SAN_BUILD) check $(JOBS)

# The agent soak for longer than the 60 s `make test` runs (AgentSoakIntegrationTest, docs/reliability.md).
SOAK_SECONDS ?= 600
soak: build
	@cd $(BUILD) && GPUMETER_SOAK_SECONDS=$(SOAK_SECONDS) ./gpumeter_tests --gtest_filter='AgentSoakIntegrationTest.*'

bench: build
	@for b in $(BUILD)/bench_*; do [ -x $$b ] && $$b; done
	@if [ -n "$$GPUMETER_BENCH_TRACE" ]; then bench/trace_memory.sh $(BUILD)/gpumeter $$GPUMETER_BENCH_TRACE; fi

# Memory estimate vs real PyTorch on the CPU (python3-torch): every configuration of docs/accuracy.md,
# tens of minutes on 2 cores; `make test` runs the small set (PlanTorchMemoryIntegrationTest).
accuracy: build
	@/usr/bin/python3 tests/torch/measure_memory.py --set all > $(BUILD)/accuracy.jsonl
	@/usr/bin/python3 tests/torch/accuracy_table.py $(BUILD)/gpumeter $(BUILD)/accuracy.jsonl

# The Debian package (CPack; man pages, completions, Python client, systemd unit: docs/packaging.md) and
# the agent's OCI image layout (debootstrap + umoci, no container engine): build/gpumeter_*.deb and
# build/gpumeter-oci/. Both need root for the image (chroot).
package: build
	@cd $(BUILD) && cpack -G DEB | tail -n 1
	@lintian --pedantic --allow-root --fail-on error,warning,info $(BUILD)/gpumeter_*.deb && echo "lintian: clean"

image: build
	@scripts/build_image.sh $(BUILD)

# The demo's share of the set-up (the compiler, the libraries gpumeter links, Python and PyTorch for the job)
# and of the build (gpumeter and the fake NVML it simulates an H100 with), then the demo itself.
# The demo's own build: gpumeter and the fake NVML only, as a unity build at -O1 without debug info (on a fresh
# 2-core machine a fifth of the compile time of the test build's objects); `make build` and `make test` use
# $(BUILD). docs/performance.md ("make demo on a fresh machine") has the timings.
DEMO_BUILD ?= build-demo
demo:
	@scripts/setup.sh demo
	@cmake -S . -B $(DEMO_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG -Wno-maybe-uninitialized" \
	  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 -DGPUMETER_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(DEMO_BUILD) -j $(JOBS) --target gpumeter fake_nvml
	@$(DEMO_BUILD)/gpumeter demo

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

# clang-tidy over src/ with the checks of .clang-tidy (warnings are errors), $(JOBS) files at a time.
tidy: build
	@$(MAKE) --no-print-directory phase-tidy

phase-tidy:
	@run-clang-tidy -p $(BUILD) -j $(JOBS) -quiet '$(CURDIR)/src/.*\.cpp$$' > $(BUILD)/tidy.log 2>&1; rc=$$?; \
	  sed -i 's/\x1b\[[0-9;]*m//g' $(BUILD)/tidy.log; \
	  grep -E '(error|warning): ' $(BUILD)/tidy.log | sort -u; \
	  [ $$rc -eq 0 ] || echo "clang-tidy: failed (exit $$rc), the whole output in $(BUILD)/tidy.log"; exit $$rc

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
