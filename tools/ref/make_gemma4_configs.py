#!/usr/bin/env python3
"""config.json files (no weights) of the published Gemma 4 targets and the z-lab gemma-4 drafter,
assembled from public values, for `dflash inspect` tests (tests/cli). Writes
tests/fixtures/configs/<name>/config.json.

  gemma-4-31B-it          ../shared/docs/TARGETS-SPEC.md §4.1 (hub layout: text_config with
  gemma-4-26B-A4B-it      global_head_dim / num_global_key_value_heads, rope_parameters per kind)
  gemma-4-31B-it-DFlash   DFLASH-SPEC.md §1.4 and ECOSYSTEM-2026-12.md §5.2: H 5376, I 10752,
                          5 layers, 64/8/128, 60 target layers, taps [1,12,23,35,46,57], B 16,
                          mask 4, theta 1e6, eps 1e-6, vocab 262144, final soft-cap 30, "mixed
                          sliding(2048, causal)/full(non-causal)"

Not published in those sources, and chosen here (marked in SOURCES.md): the drafter's exact
layer_types order (taken as [S, S, S, S, F], the z-lab Qwen3.6-27B-DFlash order), its
max_position_embeddings (262144, the target's) and the vision_config stubs of the targets (the
text-only engine ignores them).
Run: python3 tools/ref/make_gemma4_configs.py
"""
from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "configs"
ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                           "rope_theta": 1000000.0}}


def text_cfg(H, L, heads, kv, global_kv, I, moe=None):
    t = {"model_type": "gemma4_text", "hidden_size": H, "num_hidden_layers": L,
         "layer_types": ["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(L)],
         "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 256,
         "global_head_dim": 512, "num_global_key_value_heads": global_kv, "attention_k_eq_v": True,
         "sliding_window": 1024, "rope_parameters": ROPE, "intermediate_size": I,
         "enable_moe_block": moe is not None, "hidden_activation": "gelu_pytorch_tanh",
         "rms_norm_eps": 1e-6, "final_logit_softcapping": 30.0, "vocab_size": 262144,
         "tie_word_embeddings": True, "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0,
         "max_position_embeddings": 262144, "use_bidirectional_attention": "vision",
         "attention_bias": False, "dtype": "bfloat16"}
    if moe:
        t.update(moe)
    return t


def target(text):
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
            "text_config": text, "vision_config": {"model_type": "gemma4_vision"},
            "tie_word_embeddings": True, "dtype": "bfloat16"}


CONFIGS = {
    "gemma-4-31B-it": target(text_cfg(5376, 60, 32, 16, 4, 21504)),
    "gemma-4-26B-A4B-it": target(text_cfg(2816, 30, 16, 8, 2, 2112, moe={
        "num_experts": 128, "top_k_experts": 8, "moe_intermediate_size": 704})),
    "gemma-4-31B-it-DFlash": {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 5376,
        "intermediate_size": 10752, "num_hidden_layers": 5, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 262144, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "max_position_embeddings": 262144, "tie_word_embeddings": True,
        "block_size": 16, "num_target_layers": 60, "hidden_act": "silu", "dtype": "bfloat16",
        "layer_types": ["sliding_attention"] * 4 + ["full_attention"], "sliding_window": 2048,
        "use_sliding_window": True, "max_window_layers": 5, "final_logit_softcapping": 30.0,
        "dflash_config": {"mask_token_id": 4, "target_layer_ids": [1, 12, 23, 35, 46, 57]}},
}


def main() -> None:
    for name, cfg in CONFIGS.items():
        d = OUT / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        print(d)


if __name__ == "__main__":
    main()
