# dflash.cpp — two commands for a newcomer:
#   make run    installs missing Debian packages, builds (Release) and runs DFlash on the embedded
#               default target + drafter pair
#   make test   same set-up, then the whole test suite through ctest
BUILD   ?= build
JOBS    ?= $(shell nproc)
DEB_PKGS = g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev \
           nlohmann-json3-dev libpcre2-dev libutf8proc-dev libzip-dev libcpp-httplib-dev \
           clang libclang-rt-14-dev curl python3-venv
DEFAULT_MODEL = tests/fixtures/default/target
DEFAULT_DRAFT = tests/fixtures/default/draft

.PHONY: all deps configure build run test fuzz clean

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

run: build
	@echo "NOTE: the embedded default models have RANDOM weights: the text is noise; the point is the pipeline and its stats."
	$(BUILD)/dflash run --model $(DEFAULT_MODEL) --draft $(DEFAULT_DRAFT) --prompt "The quick brown fox" --max-tokens 64 --temperature 0

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

fuzz: deps
	bash fuzz/run_short.sh

clean:
	rm -rf $(BUILD)
