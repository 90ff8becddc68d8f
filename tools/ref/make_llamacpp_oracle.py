#!/usr/bin/env python3
"""llama.cpp side by side on the real Gemma-3-270M Q4_K_M GGUF, oracle = llama.cpp itself.

Writes tests/fixtures/gguf/gemma3_270m_llamacpp.json:
  prompts[i]: the 20 prompts of gemma3_270m_oracle.json with
     bos_ids     llama.cpp's tokenization with its default specials (add_special = true: what
                 llama-simple / llama-cli feed the model — checks the BOS it prepends);
     greedy      32 argmax tokens from llama.cpp (our driver over llama.h, 2 threads);
     simple_text what the stock `llama-simple -n 32` binary printed after the prompt (its
                 greedy sampler on the same file), for a binary-level cross-check of `greedy`;
  corpus[i]: llama.cpp's ids (add_special = false, parse_special = true) for each of the
     2,249 lines of tests/fixtures/tokenizer/corpus.json (tools/ref/tokenizer_corpus.py).

    python3 tools/ref/make_llamacpp_oracle.py --llama-cpp SRC --build BUILD [--model GGUF]
SRC: a llama.cpp source tree (headers: include/llama.h, ggml/include); BUILD: its build folder
(bin/ with libllama.so and llama-simple), both outside this repo. --ggml-cpu DIR: a
libggml-cpu.so to load instead (llama.cpp's AMX matmul segfaults on our Sapphire Rapids VM; a
ggml-cpu built with GGML_NATIVE=OFF and the AVX-512 F/VNNI/BF16/VBMI flags — Zen 4's ISA — runs). tools/ref/llamacpp_driver.cc
(ours) is compiled into BUILD against libllama. Needs only the Python standard library.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
OUT = FIX / "gguf" / "gemma3_270m_llamacpp.json"
N_GEN = 32


def ascii_json(obj) -> str:
    return json.dumps(obj, ensure_ascii=True)


def run_driver(driver: Path, mode: str, model: str, lines: list[str], extra: list[str] = []) -> list:
    r = subprocess.run([str(driver), mode, model, *extra], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, check=True)
    out = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    assert len(out) == len(lines), (mode, len(out), len(lines), r.stderr[-2000:])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, type=Path)
    ap.add_argument("--build", required=True, type=Path)
    ap.add_argument("--ggml-cpu", type=Path, default=None,
                    help="folder with a libggml-cpu.so to use instead of BUILD's (e.g. one built "
                         "without AMX where llama.cpp's AMX path crashes), via LD_LIBRARY_PATH")
    ap.add_argument("--model", default=os.path.join(os.environ.get("DFLASH_CACHE", os.path.expanduser("~/.cache/dflash")),
                                                   "gemma-3-270m-q4_k_m.gguf"))
    args = ap.parse_args()
    if args.ggml_cpu:
        os.environ["LD_LIBRARY_PATH"] = f"{args.ggml_cpu}:" + os.environ.get("LD_LIBRARY_PATH", "")
    bindir = args.build / "bin"
    driver = args.build / "dflash_llamacpp_driver"
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{args.llama_cpp / 'include'}",
                    f"-I{args.llama_cpp / 'ggml' / 'include'}", str(REPO / "tools/ref/llamacpp_driver.cc"),
                    f"-L{bindir}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{bindir}", "-o", str(driver)],
                   check=True)

    oracle = json.loads((FIX / "gguf" / "gemma3_270m_oracle.json").read_text())
    texts = [p["text"] for p in oracle["prompts"]]
    prompt_ids = [p["ids"] for p in oracle["prompts"]]
    # add_special = true tokenization, as llama-simple does it: the driver tokenizes without
    # specials, so the BOS check goes through the stock binary's own printout below.
    plain = run_driver(driver, "tokenize", args.model, [ascii_json({"text": t}) for t in texts])
    greedy = run_driver(driver, "greedy", args.model, [ascii_json({"ids": ids}) for ids in prompt_ids],
                        [str(N_GEN)])
    prompts = []
    for t, ids, pl, g in zip(texts, prompt_ids, plain, greedy):
        r = subprocess.run([str(bindir / "llama-simple"), "-m", args.model, "-n", str(N_GEN), t],
                           capture_output=True, text=True)
        out = r.stdout
        # llama-simple prints the prompt's pieces (with "<bos>" when it prepends one), then the
        # generated pieces, then "\n".
        k = out.find(t)
        prompts.append({"text": t, "ids": ids, "plain_ids": pl["ids"],
                        "simple_prefix": out[:k] if k >= 0 else None,
                        "simple_text": out[k + len(t):].removesuffix("\n") if k >= 0 else None,
                        "greedy": g["greedy"]})
    corpus = json.loads((FIX / "tokenizer" / "corpus.json").read_text())
    cids = run_driver(driver, "tokenize", args.model, [ascii_json({"text": s}) for s in corpus])
    commit = ""
    try:
        commit = subprocess.run(["git", "-C", str(args.llama_cpp), "rev-parse", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        pass
    meta = {"reference": "llama.cpp (llama.h API via tools/ref/llamacpp_driver.cc; llama-simple)",
            "ggml_cpu": str(args.ggml_cpu) if args.ggml_cpu else "BUILD's",
            "llama_cpp": commit or str(args.llama_cpp), "model": os.path.basename(args.model),
            "n_gen": N_GEN, "threads": 2}
    OUT.write_text(json.dumps({"meta": meta, "prompts": prompts, "corpus": [c["ids"] for c in cids]},
                              ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(REPO)} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
