# bulwark: the two entry points of the README, and the steps they share.
# Every target installs what is missing first, so each works on a fresh
# Debian 12 machine as root.
JOBS ?= $(shell nproc)
BUILD ?= build

.PHONY: all deps configure build demo test lint bench fuzz clean

all: build

deps:
	bash scripts/install-deps.sh

# Ninja where the build directory is new; a build directory that an earlier
# checkout configured with make keeps its generator (CMake refuses a switch).
GENERATOR = $(if $(wildcard $(BUILD)/CMakeCache.txt),,-G Ninja)
configure: deps
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: prepare the default corpus if missing, then `bulwark demo`:
# a 4-machine local cluster trains the small model through every fault class.
# It builds only the three binaries the demo runs, not the tests.
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target bulwark bulwark-train bulwark-prepare
	bash scripts/demo.sh

# Every test, through CTest; the suite's wall time is its last line.
test: build
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure --timeout 600

# Clang's thread-safety analysis over the code that shares state between
# threads (common/mutex.h says how fields name their locks): a warning is an
# error. Its own build directory, the control plane's libraries only. Then,
# where the CUDA toolkit is, the trainer compiled as the GPU build compiles it.
LINT_TARGETS = bulwark_controller_server bulwark_agent
lint:
	BULWARK_LINT=1 bash scripts/install-deps.sh
	cmake -S . -B build-lint $(if $(wildcard build-lint/CMakeCache.txt),,-G Ninja) \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
	  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety -Wno-unused-command-line-argument"
	cmake --build build-lint -j $(JOBS) --target $(LINT_TARGETS)
	@if [ -x /usr/local/cuda/bin/nvcc ]; then bash scripts/cuda-compile-check.sh; \
	else echo "lint: no CUDA toolkit (/usr/local/cuda): the CUDA build's compile check is skipped"; fi

# Benchmarks print their figures; they never fail on a number.
bench:
	BULWARK_BENCH=1 bash scripts/install-deps.sh
	$(MAKE) build
	bash bench/trainer_throughput/run.sh
	bash bench/recovery/run.sh
	bash bench/implicit/run.sh
	bash bench/ladder/run.sh
	bash bench/checkpoint_overhead/run.sh
	bash bench/checksum/run.sh
	/usr/bin/python3 bench/poet_cost/run.py
	/usr/bin/python3 bench/poet_orthogonality/run.py
	/usr/bin/python3 bench/poet_quality/run.py   # about an hour on 2 cores

# Each fuzz harness under libFuzzer for FUZZ_SECONDS (default 60), in its
# own clang build (build-fuzz); prints executions and coverage per harness.
# `make test` replays the same harnesses' corpora without clang.
FUZZ_SECONDS ?= 60
fuzz:
	BULWARK_FUZZ=1 bash scripts/install-deps.sh
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash fuzz/run.sh

clean:
	rm -rf $(BUILD) build-fuzz build-lint
