# dflash.cpp — two commands for a newcomer:
#   make run    installs missing Debian packages, builds (Release) and runs DFlash on the real
#               Gemma-3-270M with the shipped trained drafter (the tiny random pair without PyPI)
#   make test   same set-up, then the whole test suite through ctest
#   make test-train   the drafter training recipe end to end on a tiny fixture (PyTorch from PyPI)
BUILD   ?= build
JOBS    ?= $(shell nproc)
DEB_PKGS = g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev \
           nlohmann-json3-dev libpcre2-dev libutf8proc-dev libzip-dev libcpp-httplib-dev \
           clang libclang-rt-14-dev curl python3-venv \
           libopenmpi-dev openmpi-bin
DEFAULT_MODEL = tests/fixtures/default/target
DEFAULT_DRAFT = tests/fixtures/default/draft

.PHONY: all deps configure build run test test-train fuzz clean

all: build

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The real Gemma-3-270M (PyPI, ~253 MB, cached outside the repo) with the DFlash drafter trained by
# tools/train and shipped in models/gemma3-270m-dflash, compared with target-only in the same run
# (and with the n-gram proposer); the tiny random pair if PyPI is out (tools/run_demo.sh).
run: build
	@bash tools/run_demo.sh $(BUILD)

# The training recipe end to end on the tiny fixture target (installs PyTorch from PyPI into
# ~/.cache/dflash/train-venv on first use, a multi-GB download: not part of `make test`).
test-train: build
	@bash tools/train/test_train.sh $(BUILD)

# The real-model tests skip (with a message) when the model cannot be fetched.
test: build
	-@bash tools/models/gemma3_270m.sh >/dev/null || echo "NOTE: the real Gemma-3-270M could not be fetched: its tests will skip"
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

fuzz: deps
	bash fuzz/run_short.sh

clean:
	rm -rf $(BUILD)
