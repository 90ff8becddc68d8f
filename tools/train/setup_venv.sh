#!/usr/bin/env bash
# Creates (once) the training venv and prints its python: PyTorch (CPU wheel unless a GPU build is
# wanted: TORCH_INDEX=... ), numpy, safetensors, gguf — all from PyPI. Never inside the repo.
#   TRAIN_VENV (default ~/.cache/dflash/train-venv)
set -euo pipefail
VENV=${TRAIN_VENV:-${DFLASH_CACHE:-$HOME/.cache/dflash}/train-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, numpy, safetensors, gguf" 2>/dev/null; then
  echo "[setup_venv] installing torch, numpy, safetensors, gguf from PyPI into $VENV (first use; large download)" >&2
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --upgrade pip >&2
  if [ -n "${TORCH_INDEX:-}" ]; then
    "$VENV/bin/pip" install -q torch --index-url "$TORCH_INDEX" >&2
  else
    "$VENV/bin/pip" install -q torch >&2
  fi
  "$VENV/bin/pip" install -q numpy safetensors gguf >&2
fi
echo "$VENV/bin/python"
