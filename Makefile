# The two quick-start commands (README): `make demo` and `make test`. Each one installs what is
# missing, configures and builds, so both work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= 2
CTEST_ARGS ?=

.PHONY: all deps configure build test demo bench clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

demo: build
	@scripts/demo.sh

bench: build
	@bench/run.sh

clean:
	@rm -rf $(BUILD)
