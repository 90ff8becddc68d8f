#!/usr/bin/env bash
# Pipeline parallel over MPI (docs/DISTRIBUTED.md): `mpirun --oversubscribe -np N dflash run
# --pipeline-parallel N` must print exactly the tokens of the single-process run, for target-only
# and DFlash runs (every drafter style in tests/fixtures), greedy and seeded sampling, one request
# and a batch (ragged segments, chunked prefill), on 2 and 3 ranks; with several concurrent
# requests also under micro-batching (--pp-microbatches 1, 2, N: up to G forwards in flight).
# Usage: pipeline_test.sh BUILD_DIR   (exit 77 = skipped: no mpirun or a build without MPI)
set -u
B=${1:?build dir}
DF="$B/dflash"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
"$DF" run --help | grep -q -- --pipeline-parallel || { echo "SKIP: no --pipeline-parallel"; exit 77; }
if ! "$DF" run --model tests/fixtures/default/target --prompt-ids 1 --max-tokens 1 --pipeline-parallel 1 \
     >/dev/null 2>/tmp/dfl_pp_probe.$$; then
  grep -q "built without MPI" /tmp/dfl_pp_probe.$$ && { rm -f /tmp/dfl_pp_probe.$$; echo "SKIP: built without MPI"; exit 77; }
fi
rm -f /tmp/dfl_pp_probe.$$
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
       OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
PROMPT=$(seq -s, 3 45)  # 43 tokens: several prefill chunks with --max-batch-tokens 16

# check NAME NP MODEL DRAFT|- EXTRA-FLAGS...
check() {
  local name=$1 np=$2 model=$3 draft=$4
  shift 4
  local dflag=()
  [ "$draft" != - ] && dflag=(--draft "$draft")
  local common=(run --model "$model" "${dflag[@]}" --threads 1 --max-tokens 24 --ignore-eos "$@")
  "$DF" "${common[@]}" > "$T/one" 2> "$T/one.err" || { echo "FAIL $name: single run failed"; cat "$T/one.err"; fail=1; return; }
  timeout 180 mpirun -np "$np" "$DF" "${common[@]}" --pipeline-parallel "$np" --pp-timeout 60 \
      > "$T/pp" 2> "$T/pp.err" || { echo "FAIL $name: mpirun -np $np failed"; tail -20 "$T/pp.err"; fail=1; return; }
  # The token ids (and drafted ids) are compared, not the timing fields of --json.
  python3 - "$T/one" "$T/pp" <<'PY' || { echo "FAIL $name (np $np): tokens differ"; fail=1; return; }
import json, sys
def ids(p):
    out = []
    for line in open(p):
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            # with --trace, "cycles" holds the drafted ids per cycle: they depend on the relayed taps
            out.append((j.get("id"), j["token_ids"], j.get("cycles")))
    return sorted(out, key=lambda x: str(x[0]))
a, b = ids(sys.argv[1]), ids(sys.argv[2])
sys.exit(0 if a and a == b and all(len(t) > 0 for _, t, _ in a) else 1)
PY
  grep -q "^\[pp\] $np stages" "$T/pp.err" || { echo "FAIL $name: no pipeline summary"; fail=1; return; }
  echo "ok   $name (np $np)"
}

cat > "$T/batch4.jsonl" <<EOF2
{"id": "a", "prompt_ids": [$PROMPT], "max_tokens": 20}
{"id": "b", "prompt_ids": [5, 6, 7], "max_tokens": 28}
{"id": "c", "prompt_ids": [9, 8, 7, 6, 5, 4, 3], "max_tokens": 12, "temperature": 0.8, "seed": 7}
{"id": "d", "prompt_ids": [2, 4, 6, 8, 10], "max_tokens": 17, "temperature": 0.9, "seed": 3}
{"id": "e", "prompt_ids": [11, 12], "max_tokens": 9}
EOF2
# inflight NAME NP G: the last run kept G forwards in flight (its [pp] summary says so)
inflight() {
  if grep -q "^\[pp\] $2 stages.* at most $3 in flight" "$T/pp.err"; then echo "ok   $1: $3 forwards in flight"
  else echo "FAIL $1: not $3 forwards in flight: $(grep '^\[pp\] [0-9]* stages' "$T/pp.err")"; fail=1; fi
}

cat > "$T/batch.jsonl" <<EOF2
{"id": "a", "prompt_ids": [$PROMPT], "max_tokens": 20}
{"id": "b", "prompt_ids": [5, 6, 7], "max_tokens": 28}
{"id": "c", "prompt_ids": [9, 8, 7, 6, 5, 4, 3], "max_tokens": 12, "temperature": 0.8, "seed": 7}
EOF2

# traffic NAME NP DRAFT|-: the bytes per row rank 0 sent in the last run (its [pp] line) equal what
# `dflash inspect --pipeline-parallel` computes for that boundary (every row of a DFlash request
# carries taps, so it is the verify-row figure there).
traffic() {
  local name=$1 np=$2 draft=$3 dflag=() key=sends_per_target_row
  [ "$draft" != - ] && { dflag=(--draft "$draft"); key=sends_per_verify_row; }
  local want got
  want=$("$DF" inspect $DEF/target --pipeline-parallel "$np" "${dflag[@]}" --json |
         python3 -c "import json,sys; print(json.load(sys.stdin)['pipeline']['ranks'][0]['$key'])")
  got=$(sed -n 's/^\[pp\] rank 0: .*(\([0-9.]*\) per row).*/\1/p' "$T/pp.err")
  if [ "${got%.0}" = "$want" ]; then echo "ok   $name: rank 0 sent $want B per row, as inspect says"
  else echo "FAIL $name: rank 0 sent '$got' B per row, inspect says $want"; fail=1; fi
}

DEF=tests/fixtures/default
for np in 2 3; do
  check "default target-only T=0"      $np $DEF/target - --prompt-ids "$PROMPT" --json --max-batch-tokens 16
  traffic "target-only traffic (np $np)" $np -
  check "default DFlash T=0"           $np $DEF/target $DEF/draft --prompt-ids "$PROMPT" --json --max-batch-tokens 16 --trace
  traffic "DFlash traffic (np $np)"      $np $DEF/draft
  check "default DFlash T=0.9 seed"    $np $DEF/target $DEF/draft --prompt-ids 1,2,3,4 --json --temperature 0.9 --seed 11
  check "default target-only T=1 seed" $np $DEF/target - --prompt-ids 1,2,3,4 --json --temperature 1 --seed 3
  check "default DFlash batch of 3"    $np $DEF/target $DEF/draft --batch "$T/batch.jsonl" --max-seqs 3 --max-batch-tokens 16
  # micro-batching across requests: groups of concurrent requests in flight at once
  check "DFlash 5 requests, 2 micro-batches" $np $DEF/target $DEF/draft --batch "$T/batch4.jsonl" --max-seqs 5 --max-batch-tokens 16 --trace --pp-microbatches 2
  inflight "DFlash 5 requests, 2 micro-batches (np $np)" $np 2
  check "target-only 5 requests, $np micro-batches" $np $DEF/target - --batch "$T/batch4.jsonl" --max-seqs 5 --pp-microbatches $np
  inflight "target-only 5 requests, $np micro-batches (np $np)" $np $np
  check "DFlash 5 requests, one step at a time" $np $DEF/target $DEF/draft --batch "$T/batch4.jsonl" --max-seqs 5 --trace --pp-microbatches 1
  inflight "DFlash 5 requests, --pp-microbatches 1 (np $np)" $np 1
  check "DFlash 5 requests, 2 micro-batches, tight KV (preemption)" $np $DEF/target $DEF/draft --batch "$T/batch4.jsonl" --max-seqs 5 --trace --pp-microbatches 2 --kv-memory 200000
  check "zlab_full (sharded) DFlash"   $np tests/fixtures/qwen3/sharded tests/fixtures/dflash/zlab_full/draft --prompt-ids "$PROMPT" --json --trace
  check "mimo_style (sharded) DFlash"  $np tests/fixtures/qwen3/sharded tests/fixtures/dflash/mimo_style/draft --prompt-ids "$PROMPT" --json --trace
  check "MiMo flash_split + drafter"   $np tests/fixtures/mimo/flash_split tests/fixtures/mimo/dflash/draft --prompt-ids "$PROMPT" --json --trace
  check "Qwen3.5 hybrid + drafter"     $np tests/fixtures/qwen35/flat_untied tests/fixtures/qwen35/flat_untied_draft --prompt-ids 1,2,3,4,5 --json --trace
done
check "dflash2_noncausal (gqa4_yarn)"  2 tests/fixtures/qwen3/gqa4_yarn tests/fixtures/dflash/dflash2_noncausal/draft --prompt-ids "$PROMPT" --json --trace
check "mixed_swa (tied_gqa2)"          2 tests/fixtures/qwen3/tied_gqa2 tests/fixtures/dflash/mixed_swa/draft --prompt-ids "$PROMPT" --json --trace
check "uneven --pp-layers 3,1"         2 $DEF/target $DEF/draft --prompt-ids "$PROMPT" --json --pp-layers 3,1 --trace
check "n-gram proposer"                3 $DEF/target ngram --prompt-ids 1,2,3,1,2,3,1,2 --json
check "q8 weights DFlash"              2 $DEF/target $DEF/draft --prompt-ids "$PROMPT" --json --weights q8 --trace
# auto block sizes: calibration moves the KV directly (caught up by the next command); the
# drafts depend on timing, the T = 0 tokens do not
check "block-size auto (calibration)"  2 $DEF/target $DEF/draft --prompt-ids "$PROMPT" --json --block-size auto
# The server path: one /v1/completions request (token-id prompt, T = 0) through `dflash serve`
# alone and under `mpirun -np 2 ... --pipeline-parallel 2` gives the same completion.
serve_one() {  # serve_one OUT NP: starts the server (NP 1 = no mpirun), sends the request, stops it
  local out=$1 np=$2 pid port="" i
  local args=(serve --model $DEF/target --draft $DEF/draft --threads 1 --port 0 --quiet)
  if [ "$np" = 1 ]; then "$DF" "${args[@]}" > /dev/null 2> "$T/serve.err" &
  else mpirun -np "$np" "$DF" "${args[@]}" --pipeline-parallel "$np" > /dev/null 2> "$T/serve.err" &
  fi
  pid=$!
  for i in $(seq 1 300); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$T/serve.err" | head -1)
    [ -n "$port" ] && grep -q '^\[serve\] ready' "$T/serve.err" && break
    sleep 0.1
  done
  curl -sf -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": [5, 6, 7, 8], "max_tokens": 20, "temperature": 0, "ignore_eos": true}' > "$out" || echo "{}" > "$out"
  kill -TERM $pid 2>/dev/null
  wait $pid 2>/dev/null
}
if command -v curl >/dev/null; then
  serve_one "$T/serve1" 1
  serve_one "$T/serve2" 2
  if python3 - "$T/serve1" "$T/serve2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ta, tb = a["choices"][0]["text"], b["choices"][0]["text"]
sys.exit(0 if ta and ta == tb and a["usage"] == b["usage"] else 1)
PY
  then echo "ok   serve: one completion through mpirun -np 2 equals the single process"
  else echo "FAIL serve: completions differ or failed"; head -c 400 "$T/serve1" "$T/serve2"; tail -5 "$T/serve.err"; fail=1
  fi
else
  echo "note: curl not found: the serve check is skipped"
fi
exit $fail
