#!/usr/bin/env bash
# How our thread pool (and llama.cpp's, side by side) holds up when another process takes a core
# (issue 15 item 5). Alternates, per round: `dflash bench` idle, `dflash bench` with a busy loop
# pinned to the last CPU, and the same two for `llama-bench` when --llama-bench is given.
#
#   tools/bench/under_load.sh --model FILE|DIR [--threads 2] [--rounds 2] [--repeats 3]
#                             [--llama-bench BIN] [--gguf FILE] [--ggml-cpu DIR]
#
# The busy loop competes with one of our threads for its core: a pool that shares work
# dynamically keeps (threads − ½) / threads of its speed — 0.75 at 2 threads — while a static
# split waits for the descheduled thread at every op and falls towards 0.5 or below.
# --repeats: timed runs per cell (their median), for both programs; with 1, the pp16 cell is a
# single 16-token pass right after the model load, before the pool has seen any preemption.
# Output: a markdown table (tok/s idle, under load, the ratio) on stdout; raw JSON in $OUT.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DFLASH=${DFLASH:-$REPO/build/dflash}
MODEL=
GGUF=
THREADS=2
ROUNDS=2
REPEATS=3
LLAMA_BENCH=
GGML_CPU=
OUT=${OUT:-/tmp/under_load.$(date -u +%Y%m%dT%H%M%S)}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --gguf) GGUF=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --llama-bench) LLAMA_BENCH=$2; shift 2 ;;
    --ggml-cpu) GGML_CPU=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $MODEL ]] || { echo "--model is required" >&2; exit 2; }
[[ -x $DFLASH ]] || { echo "build dflash first ($DFLASH missing)" >&2; exit 2; }
[[ -z $GGUF && $MODEL == *.gguf ]] && GGUF=$MODEL
mkdir -p "$OUT"
LAST_CPU=$(( $(nproc) - 1 ))

busy_pid=
start_load() { taskset -c "$LAST_CPU" bash -c 'while :; do :; done' & busy_pid=$!; sleep 0.5; }
stop_load() { [[ -n $busy_pid ]] && kill "$busy_pid" 2>/dev/null && wait "$busy_pid" 2>/dev/null || true; busy_pid=; }
trap stop_load EXIT

ours() {  # $1 = tag
  "$DFLASH" bench --model "$MODEL" --threads "$THREADS" --repeats "$REPEATS" --pp 16 --tg 64 --verify 1,16 \
    --skip machine,draft,dflash --json >"$OUT/ours.$1.json" 2>"$OUT/ours.$1.err" ||
    echo "dflash bench failed: $OUT/ours.$1.err" >&2
}
theirs() {  # $1 = tag
  LD_LIBRARY_PATH=${GGML_CPU}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    "$LLAMA_BENCH" -m "$GGUF" -t "$THREADS" -p 16 -n 64 -r "$REPEATS" -o json >"$OUT/theirs.$1.json" \
    2>"$OUT/theirs.$1.err" || echo "llama-bench failed: $OUT/theirs.$1.err" >&2
}
for ((r = 1; r <= ROUNDS; r++)); do
  ours "idle.$r"; start_load; ours "load.$r"; stop_load
  if [[ -n $LLAMA_BENCH ]]; then theirs "idle.$r"; start_load; theirs "load.$r"; stop_load; fi
done

python3 - "$OUT" "$THREADS" <<'PYEOF'
import glob, json, statistics, sys
out, threads = sys.argv[1], int(sys.argv[2])
def load(p):
    try:
        with open(p) as f: return json.load(f)
    except Exception: return None
def med(v):
    v = [x for x in v if x]
    return statistics.median(v) if v else None
def ours(kind):
    runs = [load(p) for p in sorted(glob.glob(f"{out}/ours.{kind}.*.json"))]
    runs = [r for r in runs if r]
    return {"tg64": med([r.get("decode_tok_s") for r in runs]),
            "pp16": med([r.get("prefill_tok_s", {}).get("16") for r in runs]),
            "verify t(16) ms": med([r.get("verify_ms", {}).get("16") for r in runs])}, runs
def theirs(kind):
    runs = [load(p) for p in sorted(glob.glob(f"{out}/theirs.{kind}.*.json"))]
    runs = [r for r in runs if r]
    pick = lambda p, g: med([e["avg_ts"] for x in runs for e in x if e.get("n_prompt") == p and e.get("n_gen") == g])
    return {"tg64": pick(0, 64), "pp16": pick(16, 0)}
oi, runs = ours("idle"); ol, _ = ours("load")
ti, tl = theirs("idle"), theirs("load")
print("| cell | ours idle | ours, one core shared | ratio | llama.cpp idle | llama.cpp, one core shared | ratio |")
print("|---|---:|---:|---:|---:|---:|---:|")
for k in ("tg64", "pp16"):
    r = lambda a, b: f"{b / a:.2f}" if a and b else "—"
    f = lambda v: f"{v:.1f}" if v else "—"
    print(f"| {k} tok/s | {f(oi[k])} | {f(ol[k])} | {r(oi[k], ol[k])} | {f(ti.get(k))} | {f(tl.get(k))} | {r(ti.get(k), tl.get(k))} |")
cpu = runs[0].get("cpu", "") if runs else ""
print(f"\n{cpu}, {threads} threads; 'one core shared' = a busy loop pinned to the last CPU; "
      f"a proportional loss keeps {(threads - 0.5) / threads:.2f} of the speed; raw runs in {out}")
PYEOF
