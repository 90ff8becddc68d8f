#!/usr/bin/env bash
# Short libFuzzer run of every fuzz/fuzz_*.cc target: builds them with clang (ASan + UBSan +
# libFuzzer) in build-fuzz/, then runs each for FUZZ_SECONDS (default 20) starting from the seed
# corpus fuzz/seeds/<target>/ (if any). Exits non-zero on any crash, sanitizer report, leak, timeout
# or out-of-memory (findings are saved as build-fuzz/artifacts/<target>/crash-*; reproduce with
# `build-fuzz/fuzz/<target> <file>`). Exits 77 (ctest: skipped) when clang or the libFuzzer
# runtime is not installed (Debian: clang libclang-rt-14-dev, see `make deps`).
#
# Env: FUZZ_SECONDS (per target), FUZZ_JOBS (targets run in parallel; default nproc),
#      FUZZ_BUILD (build dir; default build-fuzz), FUZZ_TARGETS (space-separated subset).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECONDS_EACH="${FUZZ_SECONDS:-20}"
JOBS="${FUZZ_JOBS:-$(nproc)}"
BUILD="${FUZZ_BUILD:-build-fuzz}"

if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
  echo "run_short.sh: clang not found (install clang libclang-rt-14-dev); skipping" >&2
  exit 77
fi
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  >"$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>"$probe/err"; then
  echo "run_short.sh: clang cannot link libFuzzer+ASan+UBSan (install libclang-rt-14-dev); skipping" >&2
  sed 's/^/  /' "$probe/err" >&2
  exit 77
fi

if [[ -n "${FUZZ_TARGETS:-}" ]]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  targets=()
  for f in fuzz/fuzz_*.cc; do targets+=("$(basename "$f" .cc)"); done
fi
[[ ${#targets[@]} -gt 0 ]] || { echo "run_short.sh: no fuzz/fuzz_*.cc targets" >&2; exit 1; }

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
echo "== configure $BUILD (clang, DFL_FUZZ=ON)"
# Build type "Fuzz" (no per-type flags): -O1 and line tables keep the ASan build quick while
# stack traces stay symbolized.
CC=clang CXX=clang++ cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Fuzz \
  -DCMAKE_C_FLAGS="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
  -DDFL_FUZZ=ON -DDFL_TESTS=OFF -DDFL_BENCH=OFF >"$BUILD.configure.log" 2>&1 ||
  { cat "$BUILD.configure.log" >&2; exit 1; }
# Build target by target so one broken harness does not hide findings in the others; a build
# failure still fails the run.
built=()
broken=()
for t in "${targets[@]}"; do
  echo "== build $t"
  if cmake --build "$BUILD" --target "$t" -j "$(nproc)"; then
    built+=("$t")
  else
    broken+=("$t")
  fi
done

run_one() {
  local t="$1"
  local bin="$BUILD/fuzz/$t" corpus="$BUILD/corpus/$t" art="$BUILD/artifacts/$t"
  local log="$BUILD/logs/$t.log"
  mkdir -p "$corpus" "$art" "$(dirname "$log")"
  local seeds=()
  [[ -d "fuzz/seeds/$t" ]] && seeds=("fuzz/seeds/$t")
  # -timeout: one input taking this long is a hang; -rss_limit_mb / -malloc_limit_mb: runaway memory.
  if "$bin" -max_total_time="$SECONDS_EACH" -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$art/" "$corpus" "${seeds[@]}" \
      >"$log" 2>&1; then
    echo "ok    $t: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') execs"
  else
    echo "FAIL  $t (log: $log)"
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -20 | sed 's/^/      /'
    return 1
  fi
}
export -f run_one
export BUILD SECONDS_EACH

status=0
if [[ ${#built[@]} -gt 0 ]]; then
  echo "== fuzz ${#built[@]} target(s), ${SECONDS_EACH}s each, $JOBS at a time"
  printf '%s\n' "${built[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one {}' || status=1
fi
if [[ ${#broken[@]} -gt 0 ]]; then
  echo "== fuzz: build FAILED for: ${broken[*]}" >&2
  status=1
fi
if [[ $status -eq 0 ]]; then
  echo "== fuzz: no crashes"
else
  echo "== fuzz: FAILED (see above)" >&2
fi
exit $status
