#!/usr/bin/env python3
"""τ against training time through OUR engine: export each kept checkpoint of a run and measure it.

  engine_curve.py --run RUN --model TARGET --prompts heldout.jsonl --out CURVE.json
                  [--steps 200,400,...] [--limit 32] [--max-tokens 32] [--threads 2] [--max-seqs 16]

For every RUN/ckpt-STEP.pt (train.py --keep-every N; or only --steps), the checkpoint is exported
(export.py, --head reduced when the run has a reduced draft vocabulary) into a temporary folder and
run by `dflash run --batch` on the held-out prompts at T = 0 (evaluate.py --tau-only): τ and the
acceptance histogram are exact at T = 0, so the figures do not depend on the machine's load.
Writes a JSON list of {minutes, step, tau, acceptance_histogram, n_prompts, max_tokens}
(model_card.py --engine-curve reads it); rows already in CURVE.json are kept, so it can be rerun.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
from export import export  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dflash", default="build/dflash")
    ap.add_argument("--steps", default="", help="comma-separated steps (default: every kept checkpoint)")
    ap.add_argument("--limit", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-seqs", type=int, default=16)
    a = ap.parse_args()
    run = Path(a.run)
    kept = {int(m.group(1)): p for p in run.glob("ckpt-*.pt") if (m := re.fullmatch(r"ckpt-(\d+)\.pt", p.name))}
    want = [int(s) for s in a.steps.split(",") if s] or sorted(kept)
    missing = [s for s in want if s not in kept]
    if missing:
        raise SystemExit(f"no RUN/ckpt-STEP.pt for steps {missing} (have {sorted(kept)})")
    out = Path(a.out)
    rows = {r["step"]: r for r in (json.loads(out.read_text()) if out.exists() else [])}
    reduced = int(torch.load(run / "prepared.pt", weights_only=False)["draft_ids"].numel()) < 262144
    for s in want:
        if s in rows and rows[s]["n_prompts"] == a.limit and rows[s]["max_tokens"] == a.max_tokens:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            info = export(str(run), tmp, "reduced" if reduced else "full", kept[s].name)
            ev = Path(tmp) / "eval.json"
            subprocess.run([sys.executable, str(here / "evaluate.py"), "--dflash", a.dflash, "--model", a.model,
                            "--draft", tmp, "--prompts", a.prompts, "--limit", str(a.limit),
                            "--max-tokens", str(a.max_tokens), "--threads", str(a.threads),
                            "--max-seqs", str(a.max_seqs), "--tau-only", "--json", str(ev)], check=True)
            r = json.loads(ev.read_text())["dflash"]
        rows[s] = {"minutes": round(info["minutes"], 2), "step": s, "tau": r.get("tau", 1.0),
                   "acceptance_histogram": r.get("acceptance_histogram"), "n_prompts": a.limit,
                   "max_tokens": a.max_tokens}
        print(f"[curve] step {s} ({info['minutes']:.1f} min): tau {rows[s]['tau']:.3f}", flush=True)
        out.write_text(json.dumps([rows[k] for k in sorted(rows)], indent=1) + "\n")


if __name__ == "__main__":
    main()
