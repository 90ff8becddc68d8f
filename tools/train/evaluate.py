#!/usr/bin/env python3
"""Held-out evaluation of a drafter through OUR engine (`dflash run --batch`), T = 0.

  evaluate.py --dflash build/dflash --model TARGET --draft DIR --prompts heldout.jsonl
              [--max-tokens 64] [--threads 2] [--limit N] [--ngram 3] [--json OUT.json]

Runs the same prompts (one at a time by default: --max-seqs 1, the latency case speculative decoding is for) three
ways in one go: target-only, the n-gram proposer (`--draft ngram:N`) and the drafter; reports for each
tau (mean tokens committed per target verify pass), the acceptance histogram (accepted drafts per cycle),
decode tok/s and the speed-up over target-only, and checks that every output is token-identical to
target-only (lossless at T = 0).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_batch(dflash, model, draft, batch_file, threads, max_seqs=1):
    cmd = [dflash, "run", "--model", model, "--batch", batch_file, "--max-seqs", str(max_seqs),
           "--threads", str(threads)]
    if draft:
        cmd += ["--draft", draft]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    return {r["id"]: r for r in rows}, wall


def summarize(rows, base=None):
    gen = sum(r["stats"]["generated_tokens"] for r in rows.values())
    decode_s = sum(r["stats"]["decode_s"] for r in rows.values())
    e2e = sum(r["stats"]["e2e_s"] for r in rows.values())
    out = {"generated_tokens": gen, "decode_s": round(decode_s, 3), "e2e_s": round(e2e, 3),
           "decode_tok_s": round((gen - len(rows)) / decode_s, 2) if decode_s else 0.0,
           "e2e_tok_s": round(gen / e2e, 2) if e2e else 0.0}
    steps = sum(r["stats"].get("draft_steps", 0) for r in rows.values())
    if steps:
        committed = sum(r["stats"]["mean_acceptance_length"] * r["stats"]["draft_steps"] for r in rows.values())
        hist = []
        for r in rows.values():
            h = r["stats"]["acceptance_histogram"]
            hist += [0] * (len(h) - len(hist))
            for i, v in enumerate(h):
                hist[i] += v
        out.update(tau=round(committed / steps, 3), draft_steps=steps, acceptance_histogram=hist,
                   per_prompt_tau=[round(r["stats"]["mean_acceptance_length"], 2) for r in rows.values()])
    if base is not None:
        same = sum(rows[k]["token_ids"] == base[k]["token_ids"] for k in base)
        out["identical_to_target_only"] = f"{same}/{len(base)}"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dflash", default="build/dflash")
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--max-seqs", type=int, default=1,
                    help="requests at once (1 = the latency case; more = batched throughput, same tau at T=0)")
    ap.add_argument("--ngram", type=int, default=3)
    ap.add_argument("--skip-ngram", action="store_true")
    ap.add_argument("--tau-only", action="store_true", help="run only the drafter (tau and histogram)")
    ap.add_argument("--json")
    a = ap.parse_args()
    lines = [json.loads(l) for l in Path(a.prompts).read_text().splitlines() if l.strip()]
    if a.limit:
        lines = lines[:a.limit]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i, l in enumerate(lines):
            f.write(json.dumps({"id": l.get("id", str(i)), "prompt": l["prompt"], "max_tokens": a.max_tokens,
                                "temperature": 0}) + "\n")
        batch = f.name
    res = {"prompts": a.prompts, "n_prompts": len(lines), "max_tokens": a.max_tokens, "threads": a.threads,
           "max_seqs": a.max_seqs}
    if a.tau_only:
        rows, _ = run_batch(a.dflash, a.model, a.draft, batch, a.threads, a.max_seqs)
        res["dflash"] = summarize(rows)
        print(f"[eval] dflash: tau {res['dflash'].get('tau', 0):.3f} | histogram "
              f"{res['dflash'].get('acceptance_histogram')}", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
        return res
    base, _ = run_batch(a.dflash, a.model, "", batch, a.threads, a.max_seqs)
    res["target_only"] = summarize(base)
    configs = [("dflash", a.draft)] + ([] if a.skip_ngram else [(f"ngram:{a.ngram}", f"ngram:{a.ngram}")])
    for name, draft in configs:
        rows, _ = run_batch(a.dflash, a.model, draft, batch, a.threads, a.max_seqs)
        s = summarize(rows, base)
        s["speedup_decode"] = round(s["decode_tok_s"] / res["target_only"]["decode_tok_s"], 3)
        s["speedup_e2e"] = round(s["e2e_tok_s"] / res["target_only"]["e2e_tok_s"], 3)
        res[name] = s
        print(f"[eval] {name}: tau {s.get('tau', 0):.2f} | decode {s['decode_tok_s']:.1f} tok/s vs target-only "
              f"{res['target_only']['decode_tok_s']:.1f} ({s['speedup_decode']:.2f}x) | identical "
              f"{s['identical_to_target_only']} | histogram {s.get('acceptance_histogram')}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
