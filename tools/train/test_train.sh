#!/usr/bin/env bash
# `make test-train`: the recipe end to end on the tiny fixture target (tests/fixtures/default/target):
# dump-taps (in two parts, merged by merge_dumps.py) -> train a few steps -> the validation loss falls
# -> export -> the export equals the trained model (tools/ref/dflash_ref.py) -> tau of each kept
# checkpoint through our engine (engine_curve.py) -> our engine loads the export and is lossless (T=0,
# identical to target-only on every prompt). PYTHON=... uses an existing interpreter instead of the venv.
set -euo pipefail
BUILD=${1:-build}
PY=${PYTHON:-$(bash tools/train/setup_venv.sh)}
T=tests/fixtures/default/target
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" tools/train/make_prompts.py --heldout "$W/prompts.jsonl" --n-heldout 40
for part in 0 1; do   # data in parts (as a long generation job writes it), merged into one dump
  "$BUILD/dflash" dump-taps --model $T --prompts "$W/prompts.jsonl" --out "$W/part$part" --layers 1,2 \
    --max-tokens 48 --threads 2 --temperature 0.8 --sampled-fraction 0.5 --seed $part --ignore-eos 2>&1 | tr '\r' '\n' | tail -1
done
"$PY" tools/train/merge_dumps.py --out "$W/dump" "$W/part0" "$W/part1"
"$PY" tools/train/train.py --dump "$W/dump" --target $T --out "$W/run" --steps 60 --eval-every 30 --keep-every 30 \
  --draft-vocab 256 --heads 4 --kv-heads 2 --intermediate 256 --threads 2 --amp fp32 2>&1 | tr '\r' '\n' | grep -E '^\[(eval|train|prepare)\]'
"$PY" - "$W/run/log.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first, last = rows[0]["val_loss"], rows[-1]["val_loss"]
print(f"[test-train] val loss {first:.3f} (step {rows[0]['step']}) -> {last:.3f} (step {rows[-1]['step']})")
sys.exit(0 if last < first - 0.1 else "[test-train] FAIL: the validation loss did not fall")
PYEOF
"$PY" tools/train/export.py --run "$W/run" --out "$W/export"
"$PY" tools/train/engine_curve.py --dflash "$BUILD/dflash" --run "$W/run" --model $T --prompts "$W/prompts.jsonl" \
  --out "$W/curve.json" --limit 4 --max-tokens 16
"$PY" tools/train/check_export.py --run "$W/run" --export "$W/export" --dump "$W/dump"
"$PY" tools/train/evaluate.py --dflash "$BUILD/dflash" --model $T --draft "$W/export" \
  --prompts "$W/prompts.jsonl" --limit 8 --max-tokens 32 --skip-ngram --json "$W/eval.json"
"$PY" - "$W/eval.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))["dflash"]
same, n = map(int, r["identical_to_target_only"].split("/"))
print(f"[test-train] engine: {same}/{n} outputs identical to target-only, tau {r.get('tau')}")
sys.exit(0 if same == n else "[test-train] FAIL: speculative output differs from target-only")
PYEOF
echo "[test-train] PASS"
