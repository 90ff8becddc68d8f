#!/usr/bin/env bash
# Pipeline-parallel figures for docs/BENCHMARKS.md: np 1 vs 2 vs 3 (one thread per rank) on the
# random 0.6B / 1.7B shapes (tools/ref/make_bench_models.py → /tmp/dflash-bench-models), 1 and 4
# concurrent target-only requests: tok/s, ITL, each rank's idle fraction (the bubble) and bytes
# sent per row, for each --pp-microbatches in MB (default "1 N": one step at a time, then N
# groups). Usage: [MODELS="qwen3-0.6b"] [MB="1 N"] bench/pp/pp_bench.sh BUILD_DIR [TOKENS] > log
set -u
B=${1:?build dir}
TG=${2:-16}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo "# $(date -u +%FT%TZ) | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) | nproc $(nproc) | load $(cut -d' ' -f1-3 /proc/loadavg)"
for m in ${MODELS:-qwen3-0.6b qwen3-1.7b}; do
  for c in 1 4; do
    for np in 1 2 3; do
      args=(bench --model /tmp/dflash-bench-models/$m --concurrency $c --tg "$TG" --repeats 1 --threads 1)
      if [ $np = 1 ]; then
        echo "## $m concurrency $c np $np"
        "$B/dflash" "${args[@]}" 2>&1 | grep -E '^\| [0-9]'
        echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
        continue
      fi
      for mb in ${MB:-1 N}; do
        [ "$mb" = N ] && mb=$np
        echo "## $m concurrency $c np $np microbatches $mb"
        timeout 900 mpirun -np $np "$B/dflash" "${args[@]}" --pipeline-parallel $np --pp-microbatches $mb 2>&1 |
          grep -E '^\| [0-9]|^\[pp\]'
        echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
      done
    done
  done
done
