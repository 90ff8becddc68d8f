#!/usr/bin/env python3
"""Export a trained drafter (RUN/ckpt.pt) in the z-lab DFlash layout.

  export.py --run RUN --out DIR [--head full|reduced]

DIR gets:
  model.safetensors  bf16, z-lab names (no `model.` prefix): fc.weight (the training tap scale folded
                     in), hidden_norm.weight, norm.weight, layers.{i}.{input_layernorm, post_attention_layernorm,
                     self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, mlp.{gate,up,down}_proj}.weight,
                     [layers.{i}.self_attn.attention_sink_bias]; with --head reduced also lm_head.weight
                     [draft_vocab, H] and d2t [draft_vocab] int64 (target id = i + d2t[i], speculators form)
  config.json        Qwen3Config keys + dflash_config {mask_token_id, target_layer_ids, use_swa,
                     swa_window_size, attention_sink_bias, num_anchors, loss_decay_gamma}
                     (the dialect of z-lab `dflash`, vLLM's qwen3_dflash config reading and ours)
  mask_embedding.pt  {"embedding": [H] float32, "mask_token_id": id}   (when trained)
--head full (default) ships no head: the drafter borrows the target's lm_head over the whole vocabulary.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file


def export(run: str, out: str, head: str = "full", ckpt: str = "ckpt.pt") -> dict:
    run = Path(run)
    st = torch.load(run / ckpt, weights_only=False)
    prep = torch.load(run / "prepared.pt", weights_only=False)
    cfg, args, sd = st["config"], st["args"], st["model"]
    scale = st["tap_scale"]
    t = {}
    for k, v in sd.items():
        if k in ("embed", "head", "tap_scale", "mask_embedding"):
            continue
        t[k] = v
    t["fc.weight"] = sd["fc.weight"] * scale[None, :]
    if head == "reduced":
        ids = prep["draft_ids"].long()
        t["lm_head.weight"] = prep["head"].float()
        t["d2t"] = ids - torch.arange(len(ids))
    tensors = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in t.items()}
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(o / "model.safetensors"), metadata={"format": "pt"})
    L = cfg["num_hidden_layers"]
    mask_id = int(args["mask_token_id"])
    dflash = {"mask_token_id": mask_id, "target_layer_ids": list(cfg["target_layer_ids"]),
              "block_size": cfg["block_size"], "num_anchors": args["anchors"],
              "loss_decay_gamma": args["gamma"] or {16: 7.0, 10: 5.0, 8: 4.0}.get(cfg["block_size"], 7.0)}
    if cfg["use_swa"]:
        dflash.update(use_swa=True, swa_window_size=cfg["swa_window_size"])
    if cfg["attention_sink_bias"]:
        dflash["attention_sink_bias"] = True
    c = {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3",
        "attention_bias": False, "attention_dropout": 0.0,
        "block_size": cfg["block_size"],
        "dflash_config": dflash,
        "head_dim": cfg["head_dim"], "hidden_act": "silu", "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "layer_types": ["full_attention"] * L,
        "max_position_embeddings": 32768, "max_window_layers": L,
        "num_attention_heads": cfg["num_attention_heads"], "num_hidden_layers": L,
        "num_key_value_heads": cfg["num_key_value_heads"], "num_target_layers": cfg["num_target_layers"],
        "rms_norm_eps": cfg["rms_norm_eps"], "rope_scaling": None, "rope_theta": cfg["rope_theta"],
        "sliding_window": cfg["swa_window_size"] if cfg["use_swa"] else None,
        "use_sliding_window": False, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "dtype": "bfloat16", "use_cache": True,
        "vocab_size": int(prep["vocab_size"]),
    }
    if head == "reduced":
        c["draft_vocab_size"] = int(len(prep["draft_ids"]))
    (o / "config.json").write_text(json.dumps(c, indent=2) + "\n")
    if "mask_embedding" in sd:
        torch.save({"embedding": sd["mask_embedding"].float().clone(), "mask_token_id": mask_id},
                   o / "mask_embedding.pt")
    size = sum(p.stat().st_size for p in o.iterdir() if p.is_file())
    return {"dir": str(o), "bytes": size, "step": st["step"], "minutes": st["elapsed"] / 60}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--head", choices=("full", "reduced"), default="full")
    ap.add_argument("--ckpt", default="ckpt.pt", help="a checkpoint file in RUN (e.g. ckpt-000200.pt)")
    a = ap.parse_args()
    print(json.dumps(export(a.run, a.out, a.head, a.ckpt)))


if __name__ == "__main__":
    main()
