#!/usr/bin/env python3
"""Qwen3 / Llama GGUF dialect fixtures, oracle = llama.cpp's own converter (convert_hf_to_gguf.py).

Converts the tiny HF checkpoints of tests/fixtures/{qwen3,llama} (written by
make_qwen3_fixtures.py / make_llama_fixtures.py) into GGUF files the way a user's GGUF was made:
metadata `qwen3.*` / `llama.*`, tensor names `blk.N.attn_q.weight` ..., the `llama` converter's
q/k row permutation, the vocabulary as `tokenizer.ggml.*`. Writes
tests/fixtures/gguf_dialects/<name>.<type>.gguf for type in f32, f16, q8_0.

Oracle logits: transformers loading each GGUF itself (`from_pretrained(gguf_file=...)`: its own
dequantizer and its own undoing of the llama q/k permutation, everything fp32; the HF folder's
config.json, since transformers' GGUF config reader ignores attention.key_length) on the folder's
golden prompt + greedy continuation: tests/fixtures/gguf_dialects/<name>.logits.safetensors
holds one [n, V] float32 tensor per type. The C++ tests compare each GGUF model with these and
with the HF folder's goldens.

  LLAMA_CPP=/path/to/llama.cpp python3 tools/ref/make_gguf_dialect_fixtures.py
LLAMA_CPP is a llama.cpp source tree (e.g. `git archive` of a fetched copy), never part of this
repo. Needs: torch, numpy, safetensors, transformers (the venv /work/venv-gguf has them); the
`gguf` package is the copy's own gguf-py.

The tiny tokenizers are made by our fixture scripts, so the converter's pre-tokenizer check (a
hash of the tokenizer's output on a fixed text) cannot know them: we tell it which llama.cpp
pre-tokenizer they are (Qwen3's split regex = "qwen2"; the tiny Llama fixtures reuse the same
byte-level BPE = "qwen2" too). Nothing else of the converter is changed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
OUT = FIX / "gguf_dialects"

# (output name, HF fixture folder)
MODELS = [
    ("qwen3_tied_gqa2", FIX / "qwen3" / "tied_gqa2"),
    ("qwen3_untied_gqa1", FIX / "qwen3" / "untied_gqa1"),
    ("llama_tied", FIX / "llama" / "tied"),
]
TYPES = ["f32", "f16", "q8_0"]

# Runs inside the child: the converter with its pre-tokenizer check answered.
_DRIVER = """
import sys
sys.path.insert(0, {src!r})
sys.argv = [{script!r}] + {args!r}
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
import convert_hf_to_gguf
convert_hf_to_gguf.main()
"""


def main() -> None:
    src = os.environ.get("LLAMA_CPP")
    if not src or not (Path(src) / "convert_hf_to_gguf.py").exists():
        sys.exit("set LLAMA_CPP to a llama.cpp source tree (with convert_hf_to_gguf.py)")
    OUT.mkdir(parents=True, exist_ok=True)
    for name, folder in MODELS:
        for t in TYPES:
            out = OUT / f"{name}.{t}.gguf"
            args = [str(folder), "--outfile", str(out), "--outtype", t]
            code = _DRIVER.format(src=src, script=str(Path(src) / "convert_hf_to_gguf.py"), args=args)
            subprocess.run([sys.executable, "-c", code], check=True, cwd=src)
            print(f"wrote {out.relative_to(REPO)} ({out.stat().st_size} bytes)")
        write_oracle(name, folder)


def write_oracle(name: str, folder: Path) -> None:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    torch.set_num_threads(1)
    g = load_file(folder / "golden.safetensors")
    ids = torch.cat([g["prompt_ids"], g["greedy_ids"][:-1]]).long()[None]
    cfg = transformers.AutoConfig.from_pretrained(str(folder))
    out = {}
    for t in TYPES:
        m = transformers.AutoModelForCausalLM.from_pretrained(
            str(OUT), gguf_file=f"{name}.{t}.gguf", config=cfg, dtype=torch.float32,
            attn_implementation="eager")
        with torch.no_grad():
            out[t] = m(ids).logits[0].contiguous()
    path = OUT / f"{name}.logits.safetensors"
    save_file(out, str(path), metadata={"reference": f"transformers {transformers.__version__} "
                                        "from_pretrained(gguf_file=...), float32, eager, CPU"})
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
