#!/usr/bin/env bash
# A/B of two builds' thread pools with and without a one-core background load (a `yes` loop this
# script starts and stops), 1 vs 2 threads, the builds run alternately in the same minutes.
#   bench/pool_under_load.sh OLD_BUILD_DIR NEW_BUILD_DIR MODEL_DIR OUT_DIR [ROUNDS]
# Writes OUT_DIR/<load>_<build>_t<N>_r<round>.{matmul,dflash}.json; summarize with
# bench/pool_under_load_table.py OUT_DIR.
set -u
OLD=$1 NEW=$2 MODEL=$3 OUT=$4 ROUNDS=${5:-2}
mkdir -p "$OUT"
FILTER='^Matmul/(BF16|BF16AMX|Q8)/(3072x1024|151936x1024)/M:(1|16)/real_time$'
hog=""
stop_hog() { [ -n "$hog" ] && kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null; hog=""; }
trap stop_hog EXIT
for load in none one; do
  if [ "$load" = one ]; then yes > /dev/null & hog=$!; sleep 1; fi
  for r in $(seq 1 "$ROUNDS"); do
    for b in old new; do
      dir=$OLD; [ "$b" = new ] && dir=$NEW
      for t in 1 2; do
        tag="$OUT/${load}_${b}_t${t}_r${r}"
        echo "$(date -u +%T) $tag load=$(cut -d' ' -f1-3 /proc/loadavg)" >&2
        DFL_THREADS=$t "$dir/bench/bench_matmul" --benchmark_filter="$FILTER" \
          --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
          --benchmark_format=json > "$tag.matmul.json" 2>/dev/null
        "$dir/dflash" bench --model "$MODEL" --skip machine,prefill,draft,dflash --tg 32 \
          --repeats 3 --threads "$t" --json > "$tag.dflash.json" 2>/dev/null
      done
    done
  done
  stop_hog
done
