#!/usr/bin/env python3
"""The exported drafter equals the trained one: for held-back sequences and random anchors, the block
hidden states of the training model (RUN/ckpt.pt, fp32) and of tools/ref/dflash_ref.py — an independent
reader of the exported folder in the z-lab layout — agree (bf16 export: relative error ~1e-2).

  check_export.py --run RUN --export DIR --dump DUMP [--n 4]
Exits non-zero when they disagree.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
sys.path.insert(0, str(here.parent / "ref"))
from data import anchor_candidates, load_dump  # noqa: E402
from dflash_ref import DFlashRef, load_draft  # noqa: E402
from model import DFlashDrafter, DrafterConfig, block_mask  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--export", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--tol", type=float, default=0.05)
    a = ap.parse_args()
    st = torch.load(Path(a.run) / "ckpt.pt", weights_only=False)
    prep = torch.load(Path(a.run) / "prepared.pt", weights_only=False)
    cfg = DrafterConfig(**st["config"])
    model = DFlashDrafter(cfg, prep["embed"].float(), prep["head"].float())
    model.register_buffer("tap_scale", st["tap_scale"])
    model.load_state_dict(st["model"], strict=False)
    model.eval()
    rcfg, w, mask = load_draft(a.export)
    ref = DFlashRef(rcfg, {k: v.float() for k, v in w.items() if k != "d2t"}, mask)
    V, H = prep["vocab_size"], prep["hidden_size"]
    table = torch.zeros(V, H)
    table[prep["used_ids"]] = prep["embed"].float()
    mask_id = rcfg["dflash_config"]["mask_token_id"]
    to_compact = torch.full((V,), -1, dtype=torch.long)
    to_compact[prep["used_ids"]] = torch.arange(len(prep["used_ids"]))
    _, seqs = load_dump(a.dump)
    seqs = [s for s in seqs if anchor_candidates(s) > 0][:a.n]
    rng = np.random.default_rng(0)
    B = cfg.block_size
    worst = 0.0
    for s in seqs:
        anchor = int(s.prompt_len + rng.integers(anchor_candidates(s)))
        blk_ids = torch.tensor([int(s.tokens[anchor])] + [mask_id] * (B - 1))
        taps = s.taps[:anchor].float()
        with torch.no_grad():
            z = model(taps[None] * model.tap_scale, to_compact[blk_ids][None], torch.arange(anchor)[None],
                      torch.arange(anchor, anchor + B)[None], block_mask(torch.tensor([[anchor]]), anchor, B,
                                                                          cfg.swa_window_size if cfg.use_swa else 0))[0]
            ref.reset()
            zr = ref.forward(taps, 0, ref.embed_block(blk_ids, table), anchor)
        err = float((z - zr).norm() / zr.norm())
        worst = max(worst, err)
    print(f"[check_export] {len(seqs)} blocks: worst relative error of the block hidden states {worst:.4f} "
          f"(tolerance {a.tol})")
    sys.exit(0 if worst <= a.tol else 1)


if __name__ == "__main__":
    main()
