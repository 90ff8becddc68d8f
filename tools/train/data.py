"""Reading a `dflash dump-taps` folder and drawing DFlash training batches from it.

A batch is `seqs` sequences, each with up to `anchors` random anchor positions a in its RESPONSE
(prompt_len <= a <= len-2: at run time the first anchor is the first generated token, with the prompt
as context). Block targets: position a+j (j = 1..B-1) predicts token x[a+j]; positions past the end or
outside the draft vocabulary carry no loss.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass
class Sequence:
    tokens: torch.Tensor   # [L] int64
    taps: torch.Tensor     # [L, K·H] bfloat16
    prompt_len: int
    sampled: bool


def load_dump(folder: str) -> tuple[dict, list[Sequence]]:
    d = Path(folder)
    meta = json.loads((d / "meta.json").read_text())
    if meta.get("format") != "dflash-taps/1":
        raise SystemExit(f"{folder}: not a dflash-taps/1 dump")
    seqs = []
    for sh in meta["shards"]:
        tok = torch.from_numpy(np.load(d / sh["tokens"]).astype(np.int64))
        taps = torch.from_numpy(np.load(d / sh["taps"]).view(np.int16)).view(torch.bfloat16)
        for off, n, plen, sampled in sh["sequences"]:
            seqs.append(Sequence(tok[off:off + n], taps[off:off + n], int(plen), bool(sampled)))
    return meta, seqs


def token_counts(seqs: list[Sequence], vocab: int, responses_only: bool = True) -> np.ndarray:
    c = np.zeros(vocab, dtype=np.int64)
    for s in seqs:
        t = s.tokens[s.prompt_len:] if responses_only else s.tokens
        np.add.at(c, t.numpy(), 1)
    return c


def anchor_candidates(s: Sequence) -> int:
    return max(0, len(s.tokens) - 1 - s.prompt_len)


@dataclass
class Batch:
    taps: torch.Tensor      # [b, S, K·H] float32 (zero padded)
    ctx_pos: torch.Tensor   # [b, S]
    anchors: torch.Tensor   # [b, A] (−1 = empty slot)
    tokens: torch.Tensor    # [b, A·B] compact ids: anchor then MASK
    blk_pos: torch.Tensor   # [b, A·B]
    targets: torch.Tensor   # [b, A, B−1] draft-vocab index, −1 = no loss


def make_batch(seqs, idx, anchors, B, to_compact, to_draft, mask_compact, rng: np.random.Generator,
               fixed_anchors=None) -> Batch:
    b = len(idx)
    S = max(len(seqs[i].tokens) for i in idx)
    KH = seqs[idx[0]].taps.shape[1]
    taps = torch.zeros(b, S, KH)
    anc = torch.full((b, anchors), -1, dtype=torch.long)
    for r, i in enumerate(idx):
        s = seqs[i]
        taps[r, :len(s.tokens)] = s.taps.float()
        if fixed_anchors is not None:
            chosen = fixed_anchors[r]
        else:
            n = anchor_candidates(s)
            chosen = s.prompt_len + np.sort(rng.choice(n, size=min(n, anchors), replace=False))
        anc[r, :len(chosen)] = torch.as_tensor(chosen, dtype=torch.long)
    a = anc.clamp(min=0)
    j = torch.arange(B)
    pos = a[..., None] + j                                            # [b, A, B]
    toks = torch.full((b, anchors, B), mask_compact, dtype=torch.long)
    tgt = torch.full((b, anchors, B - 1), -1, dtype=torch.long)
    for r, i in enumerate(idx):
        t = seqs[i].tokens
        L = len(t)
        toks[r, :, 0] = to_compact[t[a[r].clamp(max=L - 1)]]
        p = pos[r, :, 1:]
        ok = (p < L) & (anc[r] >= 0)[:, None]
        tgt[r][ok] = to_draft[t[p[ok]]]
    return Batch(taps, torch.arange(S).expand(b, S), anc, toks.view(b, -1), pos.view(b, -1), tgt)
