#!/usr/bin/env bash
# End-to-end test of `dflash serve` with the clients users run: the official `openai` Python
# client (PyPI, installed into a venv under the build folder) and curl, against the tiny default
# fixture pair. See openai_client_test.py for the checks.
#
# Usage: tests/e2e/openai_client_test.sh [BUILD_DIR]      (ctest: e2e_openai_client)
# Exits 77 (ctest: skipped) with a message when PyPI is unreachable, python3 cannot make a venv,
# curl is missing, or the dflash binary has no `serve` command yet.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
DFLASH="$BUILD/dflash"
skip() { echo "openai_client_test: SKIPPED: $*" >&2; exit 77; }

[[ -x "$DFLASH" ]] || { echo "openai_client_test: $DFLASH not built" >&2; exit 1; }
"$DFLASH" serve --help >/dev/null 2>&1 || skip "this dflash build has no 'serve' command"
command -v curl >/dev/null || skip "curl is not installed (Debian: curl)"
command -v python3 >/dev/null || skip "python3 is not installed"

VENV="$BUILD/e2e-venv"
if ! "$VENV/bin/python" -c "import openai" >/dev/null 2>&1; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" >/dev/null 2>&1 || skip "python3 -m venv failed (Debian: python3-venv)"
  if ! timeout 300 "$VENV/bin/pip" install -q --disable-pip-version-check --retries 1 --timeout 20 \
       openai >"$BUILD/e2e-pip.log" 2>&1; then
    tail -3 "$BUILD/e2e-pip.log" >&2 || true
    rm -rf "$VENV"
    skip "cannot install the 'openai' package from PyPI (unreachable?); log: $BUILD/e2e-pip.log"
  fi
fi
exec "$VENV/bin/python" "$ROOT/tests/e2e/openai_client_test.py" --dflash "$DFLASH" --root "$ROOT" "${@:2}"
