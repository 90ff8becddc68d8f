#!/usr/bin/env bash
# Faults in a pipeline-parallel job end it on every rank with an error, no hang:
#   1. a worker killed (SIGKILL) mid-generation;
#   2. a worker stopped (SIGSTOP: its messages never come) → the driver's --pp-timeout;
#   3. the driver killed mid-generation;
# once with one request, once with four in three micro-batch groups (several steps in flight).
# Each case: mpirun exits non-zero, every rank process is gone within the limit, and the
# surviving ranks said why on stderr. Usage: fault_test.sh BUILD_DIR (exit 77 = skipped).
set -u
B=${1:?build dir}
DF="$B/dflash"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 77; }
"$DF" run --model tests/fixtures/default/target --prompt-ids 1 --max-tokens 1 --pipeline-parallel 1 \
  >/dev/null 2>&1 || { echo "SKIP: built without MPI"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
       OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
LIMIT=30  # seconds from the fault to the end of every rank

# Several requests in micro-batches (3 groups in flight); "s" finishes first, so stdout streams.
cat > "$T/batch.jsonl" <<EOF2
{"id": "s", "prompt_ids": [1, 2], "max_tokens": 4}
{"id": "a", "prompt_ids": [1, 2, 3], "max_tokens": 2000}
{"id": "b", "prompt_ids": [4, 5, 6, 7], "max_tokens": 2000}
{"id": "c", "prompt_ids": [8, 9], "max_tokens": 2000}
EOF2
ONE=(--prompt-ids 1,2,3 --max-tokens 2000)
MICRO=(--batch "$T/batch.jsonl" --max-seqs 4 --pp-microbatches 3)

# case NAME VICTIM_RANK SIGNAL EXPECTED_STDERR_REGEX REQUEST-FLAGS...
case_() {
  local name=$1 victim=$2 sig=$3 want=$4
  shift 4
  mpirun -np 3 "$DF" run --model tests/fixtures/default/target --draft tests/fixtures/default/draft \
      "$@" --ignore-eos --ctx-size 2048 --threads 1 \
      --pipeline-parallel 3 --pp-timeout 4 > "$T/out" 2> "$T/err" &
  local mp=$! pids="" vpid="" i
  for i in $(seq 1 100); do  # the three ranks, once the generation streams
    pids=$(pgrep -P $mp -x dflash | tr '\n' ' ')
    [ "$(echo $pids | wc -w)" = 3 ] && [ -s "$T/out" ] && break
    sleep 0.1
  done
  for p in $pids; do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim" && vpid=$p
  done
  if [ -z "$vpid" ] || ! kill -0 $mp 2>/dev/null; then
    echo "FAIL $name: could not find rank $victim mid-generation"; kill -9 $mp $pids 2>/dev/null; fail=1; return
  fi
  sleep 0.5
  kill -"$sig" "$vpid"
  local t0=$SECONDS
  while kill -0 $mp 2>/dev/null && [ $((SECONDS - t0)) -le $LIMIT ]; do sleep 0.2; done
  if kill -0 $mp 2>/dev/null; then
    echo "FAIL $name: the job still runs $LIMIT s after the fault"; tail -8 "$T/err"
    for p in $pids; do echo "  rank pid $p: $(awk "{print \$3}" /proc/$p/stat 2>/dev/null)"; done
    kill -9 $mp $pids 2>/dev/null; fail=1; return
  fi
  wait $mp
  local rc=$?
  local left=""
  while :; do  # every rank gone (a zombie waiting for its reaper counts as gone)
    left=""
    for p in $pids; do
      st=$(awk '{print $3}' /proc/$p/stat 2>/dev/null) && [ "$st" != Z ] && left="$left $p"
    done
    [ -z "$left" ] || [ $((SECONDS - t0)) -gt $LIMIT ] && break
    sleep 0.2
  done
  [ -n "$left" ] && { kill -9 $left 2>/dev/null; }
  if [ $rc = 0 ]; then echo "FAIL $name: mpirun exited 0"; fail=1; return; fi
  if [ -n "$left" ]; then echo "FAIL $name: ranks still alive:$left"; fail=1; return; fi
  if ! grep -Eq "$want" "$T/err"; then echo "FAIL $name: no clear error on stderr:"; tail -5 "$T/err"; fail=1; return; fi
  echo "ok   $name (rc $rc, ended $((SECONDS - t0)) s after the fault)"
  grep -oE "dflash(\[rank [0-9]+\])?: .*" "$T/err" | sed "s/^/       /"
}

case_ "worker killed"        0 KILL 'dflash\[rank [12]\]' "${ONE[@]}"
case_ "worker stopped"       1 STOP 'no message from rank 1 within 4 s|dflash\[rank 2\]' "${ONE[@]}"
case_ "driver killed"        2 KILL 'dflash\[rank [01]\]' "${ONE[@]}"
case_ "micro-batches: worker killed"  1 KILL 'dflash\[rank [02]\]' "${MICRO[@]}"
case_ "micro-batches: worker stopped" 0 STOP 'no message from rank 0 within 4 s|dflash\[rank [12]\]' "${MICRO[@]}"
case_ "micro-batches: driver killed"  2 KILL 'dflash\[rank [01]\]' "${MICRO[@]}"
exit $fail
