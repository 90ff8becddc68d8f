#!/usr/bin/env bash
# Serving benchmark of `dflash serve` with a standard OpenAI load generator (aiperf, PyPI):
# streamed completions at concurrency 1 / 4 / 16 / 64, DFlash on (--draft) and off (target
# only); prints one table row per point (TTFT / ITL medians, output tok/s, requests/s) from
# aiperf's JSON export. Token counts are the server's (usage), not re-tokenized text.
#
# Usage: tools/bench/serve_aiperf.sh TARGET DRAFT [SECONDS_PER_POINT] [TOKENIZER_DIR]
#   TARGET / DRAFT: checkpoint folders (or .gguf files; DRAFT may be ngram[:N]); TOKENIZER_DIR (default TARGET) is what aiperf uses to
#   synthesize prompts. Env: BUILD (default build), ISL / OSL (default 64 / 64), CONC
#   (default "1 4 16 64"), THREADS (default: all cores), MAX_SEQS (default 16).
# aiperf goes into $BUILD/bench-venv (pip install aiperf).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TARGET="$(realpath "$1")"; DRAFT="$2"; SECS="${3:-20}"; TOK="$(realpath "${4:-$1}")"
[[ -e "$DRAFT" ]] && DRAFT="$(realpath "$DRAFT")"  # a folder / .gguf, or ngram[:N]
BUILD="${BUILD:-$ROOT/build}"; ISL="${ISL:-64}"; OSL="${OSL:-64}"; CONC="${CONC:-1 4 16 64}"
MAX_SEQS="${MAX_SEQS:-16}"
VENV="$BUILD/bench-venv"
[[ -x "$VENV/bin/aiperf" ]] || { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q aiperf; }
threads=(); [[ -n "${THREADS:-}" ]] && threads=(--threads "$THREADS")
OUT="$(mktemp -d)"
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$OUT"' EXIT

echo "| mode | concurrency | TTFT p50 ms | ITL p50 ms | output tok/s | req/s | requests |"
echo "|---|---|---|---|---|---|---|"
for mode in dflash target-only; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  draft=(); [[ $mode == dflash ]] && draft=(--draft "$DRAFT")
  "$BUILD/dflash" serve --model "$TARGET" "${draft[@]}" --port "$port" --max-seqs "$MAX_SEQS" \
    "${threads[@]}" --quiet --served-model-name bench >"$OUT/server_$mode.log" 2>&1 &
  PID=$!
  until curl -sf "http://127.0.0.1:$port/ready" >/dev/null; do
    kill -0 "$PID" 2>/dev/null || { cat "$OUT/server_$mode.log" >&2; exit 1; }
    sleep 0.5
  done
  for c in $CONC; do
    dir="$OUT/$mode-$c"
    (cd "$OUT" && "$VENV/bin/aiperf" profile --model bench --url "http://127.0.0.1:$port" \
      --endpoint-type completions --streaming --concurrency "$c" --benchmark-duration "$SECS" \
      --tokenizer "$TOK" --isl "$ISL" --osl "$OSL" --extra-inputs ignore_eos:true \
      --use-server-token-count --ui none --output-artifact-dir "$dir" >"$dir.log" 2>&1) ||
      { echo "aiperf failed ($mode, concurrency $c): $dir.log" >&2; tail -20 "$dir.log" >&2; exit 1; }
    python3 - "$dir/profile_export_aiperf.json" "$mode" "$c" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
g = lambda k, f: j.get(k, {}).get(f) or 0
print(f"| {sys.argv[2]} | {sys.argv[3]} | {g('time_to_first_token','p50'):.1f} | {g('inter_token_latency','p50'):.2f} "
      f"| {g('output_token_throughput','avg'):.1f} | {g('request_throughput','avg'):.2f} | {int(g('request_count','avg'))} |")
PY
  done
  kill -TERM "$PID"; wait "$PID" || true
done
