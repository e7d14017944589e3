# The two quick-start commands (README): `make demo` and `make test`. Each one installs what is
# missing, configures and builds, so both work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= 2
CTEST_ARGS ?=

.PHONY: all deps configure build install test demo demo-cluster bench clean fuzz fuzz-build fuzz-ci test-asan test-tsan

all: build

deps:
	@scripts/install-deps.sh

# Ninja: a target's sources compile while the libraries it links are still being built (make's
# generator waits for them), which keeps both cores busy through the folders' chain.
GENERATOR ?= Ninja

$(BUILD)/CMakeCache.txt: | deps
	@cmake -S . -B $(BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Release >/dev/null

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The library, its headers, the CLI and the CMake package under PREFIX (docs/cpp-api.md).
PREFIX ?= /usr/local
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

test: build
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error -j $(JOBS) $(CTEST_ARGS)

demo: build
	@scripts/demo.sh

# The demo's training on two hosts made of network namespaces (docs/multi-host.md; needs root).
demo-cluster: build
	@scripts/demo-cluster.sh

bench: build
	@bench/run.sh

# Sanitizer builds (tests/sanitizers/README.md): loom instrumented in a directory of its own, then
# its unit tests and the tests labelled `threads` (every helper thread, under mpiexec where it runs)
# under AddressSanitizer + UndefinedBehaviorSanitizer (`make test-asan`), the `threads` tests under
# ThreadSanitizer (`make test-tsan`). Any report fails the target.
# Fuzzing (tests/fuzz/README.md): every reader of user bytes under libFuzzer, built in the same
# AddressSanitizer directory (loom's folder libraries carry the coverage calls libFuzzer is guided
# by; NOTE [Coverage without clang] in tests/fuzz/coverage.cpp), so `make test-asan` and `make fuzz`
# share one instrumented build. `make fuzz FUZZ_SECONDS=N` runs each target N seconds on a copy of
# its seed corpus, JOBS targets at a time; `make fuzz-ci` runs each for 20 s.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_SECONDS ?= 60
SANITIZE_CMAKE = -DCMAKE_BUILD_TYPE=RelWithDebInfo \
                 -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1"
# ThreadSanitizer runs the `threads` tests only, so it builds only what they run.
ASAN_TARGETS = loom_unit_tests loom_schedule_tests loom_plan_tests loom_dist_tests loom_cli
TSAN_TARGETS = loom_dist_tests loom_cli

$(ASAN_BUILD)/CMakeCache.txt: | deps
	@cmake -S . -B $(ASAN_BUILD) -G "$(GENERATOR)" $(SANITIZE_CMAKE) -DLOOM_SANITIZE=address -DLOOM_FUZZ=ON >/dev/null

$(TSAN_BUILD)/CMakeCache.txt: | deps
	@cmake -S . -B $(TSAN_BUILD) -G "$(GENERATOR)" $(SANITIZE_CMAKE) -DLOOM_SANITIZE=thread >/dev/null

test-asan: deps $(ASAN_BUILD)/CMakeCache.txt
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target $(ASAN_TARGETS)
	@tests/sanitizers/run.sh address $(ASAN_BUILD) -j $(JOBS) $(CTEST_ARGS)

test-tsan: deps $(TSAN_BUILD)/CMakeCache.txt
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TARGETS)
	@tests/sanitizers/run.sh thread $(TSAN_BUILD) -j $(JOBS) $(CTEST_ARGS)

fuzz-build: deps $(ASAN_BUILD)/CMakeCache.txt
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target loom_fuzz_all

fuzz: fuzz-build
	@FUZZ_JOBS=$(JOBS) tests/fuzz/run.sh $(ASAN_BUILD) $(FUZZ_SECONDS)

fuzz-ci: fuzz-build
	@FUZZ_JOBS=$(JOBS) tests/fuzz/run.sh $(ASAN_BUILD) 20

clean:
	@rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
