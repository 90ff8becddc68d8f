#!/usr/bin/env python3
"""Train a DFlash drafter on a `dflash dump-taps` folder (CPU by default, a GPU when present).

  train.py --dump DIR --target MODEL(.gguf|dir) --out RUN [--layers 1] [--draft-vocab 8192]
           [--steps N | --max-minutes M] [--resume] [--use-swa --swa-window W] [--sink-bias]

Objective (DFlash paper, DFLASH-SPEC §2.4): per sequence `--anchors` random anchors in the response,
blocks [x_a, MASK x (B-1)] after each, cross-entropy on the target's tokens x[a+k] (k = 1..B-1) weighted
by exp(-(k-1)/gamma) (gamma 7 for B = 16). Target embedding (x the family's scale) and head are frozen;
the head is restricted to the `--draft-vocab` most frequent response tokens (0 = full vocabulary), the
speculators `draft_vocab_size` + `d2t` form. Taps are standardised per dimension by a fixed scale that
export folds into fc (so the exported fc reads the raw taps our engine hands it).

RUN/ holds prepared.pt (vocabulary, embedding rows), ckpt.pt (resumable), log.jsonl (loss, offline tau
estimate on the ~5 % of the sequences held back by prompt hash, wall time), and export/ (see export.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data import anchor_candidates, load_dump, make_batch, token_counts  # noqa: E402
from model import DFlashDrafter, DrafterConfig, block_mask, decay_weights  # noqa: E402


def prepare(args, meta, seqs, out: Path) -> dict:
    """Vocabulary and frozen tables (cached in RUN/prepared.pt: dequantizing a GGUF head is slow)."""
    f = out / "prepared.pt"
    if f.exists():
        return torch.load(f, weights_only=False)
    from target_io import load_target_tables

    t0 = time.time()
    tt = load_target_tables(args.target)
    V = tt.vocab_size
    counts = token_counts(seqs, V)
    order = np.argsort(-counts, kind="stable")
    K = V if args.draft_vocab <= 0 else min(args.draft_vocab, V)
    draft_ids = np.sort(order[:K])                      # ascending target ids (d2t is monotone)
    covered = counts[draft_ids].sum() / max(1, counts.sum())
    used = np.zeros(V, dtype=bool)
    for s in seqs:
        used[s.tokens.numpy()] = True
    used[args.mask_token_id] = True
    used_ids = np.nonzero(used)[0]
    p = {
        "vocab_size": V, "hidden_size": tt.hidden_size, "num_layers": tt.num_layers, "family": tt.family,
        "embed_scale": tt.embed_scale,
        "used_ids": torch.from_numpy(used_ids),
        "embed": torch.from_numpy(tt.embed[used_ids] * tt.embed_scale),
        "draft_ids": torch.from_numpy(draft_ids),
        "head": torch.from_numpy(np.ascontiguousarray(tt.head[draft_ids])),
        "coverage": float(covered),
    }
    torch.save(p, f)
    print(f"[prepare] target {tt.family} V={V} H={tt.hidden_size}; draft vocab {K} covers {covered:.2%} of "
          f"response tokens; {len(used_ids)} distinct ids in the data ({time.time() - t0:.0f}s)", flush=True)
    return p


def held_back(seqs) -> list[int]:
    """The offline validation sequences: those whose PROMPT hashes to 0 mod 20 (~5 %). A property of
    each sequence, not of its index, so the split stays the same when a run resumes on a dump that
    grew (merge_dumps.py) and a prompt's greedy and sampled responses fall on the same side."""
    keys = [zlib.crc32(s.tokens[:s.prompt_len].numpy().astype(np.int32).tobytes()) for s in seqs]
    val = [i for i, k in enumerate(keys) if k % 20 == 0]
    return val or [int(np.argmin(keys))]


def tap_scale(seqs) -> torch.Tensor:
    """Per-dimension 1/rms of the taps over (up to 20k) training rows."""
    rows = torch.cat([s.taps for s in seqs])[:20000].float()
    return 1.0 / rows.pow(2).mean(0).sqrt().clamp(min=1e-3)


def offline_eval(model, seqs, val, args, maps, weights, max_blocks=400):
    """Mean loss and tau estimate (1 + the correct-prefix length of greedy drafts) on val anchors."""
    model.eval()
    negatives, args._negatives = getattr(args, "_negatives", None), None  # the draft vocabulary only
    rng = np.random.default_rng(1234)
    B = args.block_size
    tot_l = tot_w = 0.0
    prefix = []
    with torch.no_grad():
        for i in range(0, len(val), args.seqs):
            idx = val[i:i + args.seqs]
            bt = make_batch(seqs, idx, args.anchors, B, *maps, rng)
            loss, lw, pred = step_loss(model, bt, args, weights, return_pred=True)   # pred [b, A, B-1]
            tot_l += float(loss) * lw
            tot_w += lw
            ok = (pred == bt.targets) & (bt.targets >= 0)          # [b, A, B-1]
            valid = bt.anchors >= 0
            run = ok.long().cumprod(-1).sum(-1)                        # correct prefix per block
            prefix += run[valid].tolist()
            if len(prefix) >= max_blocks:
                break
    model.train()
    args._negatives = negatives
    return tot_l / max(tot_w, 1e-9), 1.0 + float(np.mean(prefix)) if prefix else 0.0


def step_loss(model, bt, args, weights, return_pred=False):
    """Weighted CE of one batch -> (loss, weight sum[, greedy draft-vocab predictions [b, A, B-1], -1 = none])."""
    b, A = bt.anchors.shape
    B = args.block_size
    S = bt.taps.shape[1]
    dev = model.fc.weight.device
    allow = block_mask(bt.anchors, S, B, args.swa_window if args.use_swa else 0).to(dev)
    bt = dataclasses.replace(bt, **{f.name: getattr(bt, f.name).to(dev) for f in dataclasses.fields(bt)})
    weights = weights.to(dev)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.amp == "bf16"):
        z = model(bt.taps * model.tap_scale, bt.tokens, bt.ctx_pos, bt.blk_pos, allow)   # [b, A·B, H]
        z = z.view(b, A, B, -1)[:, :, 1:]                                                # rows 1..B-1
        tgt = bt.targets
        m = tgt >= 0
        logits_sel = model.logits(z[m]).float()                                          # [n, V_draft]
        if getattr(args, "_negatives", None) is not None:
            # Sampled negatives from the rest of the target head: at run time the drafter may borrow
            # the whole head, so rare tokens must not win the argmax either.
            neg = z[m] @ args._negatives.to(dev, z.dtype).t()
            logits_sel = torch.cat([logits_sel, neg.float()], -1)
    ce = torch.nn.functional.cross_entropy(logits_sel, tgt[m], reduction="none")
    w = weights.expand_as(tgt)[m]
    lw = float(w.sum())
    loss = (ce * w).sum() / max(lw, 1e-9)
    if return_pred:
        pred = torch.full(tgt.shape, -1, dtype=torch.long, device=dev)
        pred[m] = logits_sel.argmax(-1)
        return loss, lw, pred.cpu()
    return loss, lw


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--target", required=True, help="the target checkpoint (.gguf or HF folder)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--intermediate", type=int, default=0, help="FFN width (default: the target's hidden x 3.2)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=0, help="default hidden / heads")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--gamma", type=float, default=0, help="loss decay (default 7 for B=16, 5 for 10, 4 for 8)")
    ap.add_argument("--anchors", type=int, default=8, help="anchors per sequence per step")
    ap.add_argument("--seqs", type=int, default=8, help="sequences per step")
    ap.add_argument("--draft-vocab", type=int, default=8192, help="draft head rows (0 = full vocabulary)")
    ap.add_argument("--mask-token-id", type=int, default=4)
    ap.add_argument("--neg-samples", type=int, default=4096,
                    help="with a reduced draft vocabulary: random rows of the rest of the target head added "
                         "as negatives each step (0 = off)")
    ap.add_argument("--no-mask-embedding", action="store_true")
    ap.add_argument("--use-swa", action="store_true")
    ap.add_argument("--swa-window", type=int, default=64)
    ap.add_argument("--sink-bias", action="store_true")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (and export) after this wall time")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--keep-every", type=int, default=0, help="also keep RUN/ckpt-STEP.pt every N steps")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads. On a shared machine keep 1: with 2 threads on 2 cores under a load "
                         "of ~13, a step took 18.5 s against 3.0 s with 1 (threads wait on each other)")
    ap.add_argument("--device", default="auto", help="auto (a GPU when present, else CPU) | cpu | cuda")
    ap.add_argument("--amp", choices=("bf16", "fp32"), default="bf16",
                    help="matmul precision (bf16 autocast: ~3x faster on CPUs with AMX / AVX512-BF16; "
                         "master weights stay fp32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    meta, seqs = load_dump(args.dump)
    seqs = [s for s in seqs if anchor_candidates(s) > 0]
    p = prepare(args, meta, seqs, out)
    H = p["hidden_size"]
    rng = np.random.default_rng(args.seed)
    val = held_back(seqs)
    vset = set(val)
    train = [i for i in range(len(seqs)) if i not in vset]

    V = p["vocab_size"]
    to_compact = torch.full((V,), -1, dtype=torch.long)
    to_compact[p["used_ids"]] = torch.arange(len(p["used_ids"]))
    to_draft = torch.full((V,), -1, dtype=torch.long)
    to_draft[p["draft_ids"]] = torch.arange(len(p["draft_ids"]))
    mask_compact = int(to_compact[args.mask_token_id])
    maps = (to_compact, to_draft, mask_compact)

    B = args.block_size
    gamma = args.gamma or {16: 7.0, 10: 5.0, 8: 4.0}.get(B, 7.0)
    heads = args.heads
    cfg = DrafterConfig(
        hidden_size=H, intermediate_size=args.intermediate or int(round(H * 3.2)),
        num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim or H // heads, rope_theta=args.rope_theta, block_size=B,
        target_layer_ids=meta["target_layer_ids"], target_hidden_size=meta["hidden_size"],
        num_target_layers=p["num_layers"], mask_token_id=mask_compact, use_swa=args.use_swa,
        swa_window_size=args.swa_window if args.use_swa else 0, attention_sink_bias=args.sink_bias,
        mask_embedding=not args.no_mask_embedding, vocab_size=V,
        draft_vocab_size=0 if len(p["draft_ids"]) == V else len(p["draft_ids"]))
    dev = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                       ("cpu" if args.device == "auto" else args.device))
    model = DFlashDrafter(cfg, p["embed"].float(), p["head"].float())
    model.register_buffer("tap_scale", tap_scale(seqs))
    model.to(dev)
    weights = decay_weights(B, gamma)
    full_head = None
    if args.neg_samples and len(p["draft_ids"]) < V:
        from target_io import load_target_tables
        full_head = load_target_tables(args.target).head   # memory-mapped when cached
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    step, elapsed = 0, 0.0
    ck = out / "ckpt.pt"
    if args.resume and ck.exists():
        st = torch.load(ck, weights_only=False)
        model.load_state_dict(st["model"], strict=False)
        model.tap_scale = st["tap_scale"].to(dev)
        opt.load_state_dict(st["opt"])
        step, elapsed = st["step"], st["elapsed"]
        rng = np.random.default_rng(args.seed + step)
        print(f"[train] resumed at step {step} ({elapsed / 60:.1f} min trained)", flush=True)
    n_params = sum(q.numel() for q in params)
    print(f"[train] {len(train)} train / {len(val)} val sequences, {n_params / 1e6:.2f}M trainable params, "
          f"draft vocab {len(p['draft_ids'])} (coverage {p['coverage']:.2%}), B={B} gamma={gamma}", flush=True)

    def save():
        torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()}, "tap_scale": model.tap_scale.cpu(), "opt": opt.state_dict(),
                    "step": step, "elapsed": elapsed, "config": dataclasses.asdict(cfg),
                    "args": vars(args)}, str(ck) + ".tmp")
        os.replace(str(ck) + ".tmp", ck)
        if args.keep_every and step % args.keep_every == 0:
            shutil.copyfile(ck, out / f"ckpt-{step:06d}.pt")   # for the tau-vs-training-time curve

    log = open(out / "log.jsonl", "a")
    t_last = time.time()
    ema = None
    tok_rate = 0.0
    if step == 0:
        vl, tau = offline_eval(model, seqs, val, args, maps, weights)
        log.write(json.dumps({"step": 0, "minutes": 0.0, "val_loss": round(vl, 4), "val_tau_offline": round(tau, 3)}) + "\n")
        log.flush()
        sys.stderr.write(f"[eval] step 0: val loss {vl:.3f}, offline tau {tau:.2f}\n")
    while step < args.steps and not (args.max_minutes and elapsed >= args.max_minutes * 60):
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * \
            (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, args.steps)))))
        for g in opt.param_groups:
            g["lr"] = lr
        if full_head is not None:
            cand = rng.integers(0, V, size=args.neg_samples)
            cand = cand[to_draft.numpy()[cand] < 0]
            args._negatives = torch.from_numpy(np.ascontiguousarray(full_head[np.sort(cand)]))
        idx = rng.choice(train, size=min(args.seqs, len(train)), replace=False).tolist()
        bt = make_batch(seqs, idx, args.anchors, B, *maps, rng)
        loss, _ = step_loss(model, bt, args, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        now = time.time()
        dt = now - t_last
        t_last = now
        elapsed += dt
        n_pred = int((bt.targets >= 0).sum())
        tok_rate = 0.9 * tok_rate + 0.1 * (n_pred / dt) if tok_rate else n_pred / dt
        lv = loss.item()
        ema = lv if ema is None else 0.95 * ema + 0.05 * lv
        total = args.steps
        bar = "#" * int(30 * step / total)
        sys.stderr.write(f"\r[{bar:<30}] step {step}/{total} loss {ema:.3f} | {tok_rate:.0f} pred tok/s | "
                         f"{elapsed / 60:.1f} min")
        rec = None
        if step % args.eval_every == 0 or step == args.steps:
            vl, tau = offline_eval(model, seqs, val, args, maps, weights)
            rec = {"step": step, "minutes": round(elapsed / 60, 2), "train_loss": round(ema, 4),
                   "val_loss": round(vl, 4), "val_tau_offline": round(tau, 3), "lr": lr}
            sys.stderr.write(f"\n[eval] step {step}: val loss {vl:.3f}, offline tau {tau:.2f}\n")
        if rec:
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if step % args.ckpt_every == 0 or (args.keep_every and step % args.keep_every == 0):
            save()
    save()
    vl, tau = offline_eval(model, seqs, val, args, maps, weights)
    log.write(json.dumps({"step": step, "minutes": round(elapsed / 60, 2), "val_loss": round(vl, 4),
                          "val_tau_offline": round(tau, 3), "final": True}) + "\n")
    log.close()
    sys.stderr.write(f"\n[train] done: step {step}, {elapsed / 60:.1f} min, val loss {vl:.3f}, offline tau {tau:.2f}\n")


if __name__ == "__main__":
    main()
