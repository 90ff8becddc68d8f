#!/usr/bin/env python3
"""config.json files (no weights) of the published Qwen3.5 / 3.6 / 3.8 targets and their drafters,
assembled from public values (../shared/docs/TARGETS-SPEC.md §5.1, ECOSYSTEM-2026-12.md §1.1,
§1.3, §4). Used by `dflash inspect` tests (tests/cli, tests/model). Writes
tests/fixtures/configs/<name>/config.json. Values not published in those sources are marked in
SOURCES below and follow the family (e.g. Qwen3.6 / 3.8 27B = the Qwen3.5-27B text config).
Run: python3 tools/ref/make_hybrid_configs.py
"""
from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "configs"
ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
        "mrope_interleaved": True, "mrope_section": [11, 11, 10]}


def text_cfg(H, L, heads, kv, v_heads, I=None, moe=None, tied=False, model_type="qwen3_5_text"):
    t = {"model_type": model_type, "hidden_size": H, "num_hidden_layers": L,
         "layer_types": [("full_attention" if (i + 1) % 4 == 0 else "linear_attention")
                         for i in range(L)],
         "full_attention_interval": 4, "num_attention_heads": heads, "num_key_value_heads": kv,
         "head_dim": 256, "attn_output_gate": True, "linear_num_key_heads": 16,
         "linear_key_head_dim": 128, "linear_num_value_heads": v_heads,
         "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "rope_parameters": dict(ROPE),
         "rms_norm_eps": 1e-6, "vocab_size": 248320, "tie_word_embeddings": tied,
         "max_position_embeddings": 262144, "mtp_num_hidden_layers": 1,
         "mamba_ssm_dtype": "float32", "hidden_act": "silu", "dtype": "bfloat16"}
    if I:
        t["intermediate_size"] = I
    if moe:
        t.update(moe)
    return t


def target(arch, model_type, text):
    return {"architectures": [arch], "model_type": model_type, "text_config": text,
            "vision_config": {"depth": 27, "hidden_size": 1152, "out_hidden_size": text["hidden_size"]},
            "tie_word_embeddings": text["tie_word_embeddings"], "image_token_id": 248056}


MOE35 = {"num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
         "shared_expert_intermediate_size": 512}
D = "Qwen3_5ForConditionalGeneration"
M = "Qwen3_5MoeForConditionalGeneration"
TARGETS = {
    "Qwen3.5-4B": target(D, "qwen3_5", text_cfg(2560, 32, 16, 4, 32, I=9216, tied=True)),
    "Qwen3.5-9B": target(D, "qwen3_5", text_cfg(4096, 32, 16, 4, 32, I=12288)),
    "Qwen3.5-27B": target(D, "qwen3_5", text_cfg(5120, 64, 24, 4, 48, I=17408)),
    "Qwen3.5-35B-A3B": target(M, "qwen3_5_moe", text_cfg(2048, 40, 16, 2, 32, moe=MOE35,
                                                         model_type="qwen3_5_moe_text")),
    "Qwen3.6-27B": target(D, "qwen3_5", text_cfg(5120, 64, 24, 4, 48, I=17408)),
    "Qwen3.6-35B-A3B": target(M, "qwen3_5_moe", text_cfg(2048, 40, 16, 2, 32, moe=MOE35,
                                                         model_type="qwen3_5_moe_text")),
    "Qwen3.8-27B": target(D, "qwen3_5", text_cfg(5120, 64, 24, 4, 48, I=17408)),
}


def zlab_drafter(H, I, L, taps, mask, heads=32, kv=8, layer_types=None, sliding=None, causal=None,
                 block=16):
    c = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H,
         "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": heads,
         "num_key_value_heads": kv, "head_dim": 128, "vocab_size": 248320, "rms_norm_eps": 1e-6,
         "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0},
         "max_position_embeddings": 262144, "tie_word_embeddings": False, "block_size": block,
         "num_target_layers": 0, "hidden_act": "silu", "dtype": "bfloat16",
         "layer_types": layer_types or ["full_attention"] * L,
         "dflash_config": {"mask_token_id": mask, "target_layer_ids": taps}}
    if sliding:
        c["sliding_window"] = sliding
        c["use_sliding_window"] = True
        c["max_window_layers"] = L
    if causal is not None:
        c["dflash_config"]["causal"] = causal
    return c


DRAFTERS = {
    # z-lab: 9B taps [1,8,15,22,29], mask 248070 (ECOSYSTEM §1.1)
    "Qwen3.5-9B-DFlash": zlab_drafter(4096, 12288, 5, [1, 8, 15, 22, 29], 248070),
    "Qwen3.5-4B-DFlash": zlab_drafter(2560, 9216, 5, [1, 8, 15, 22, 29], 248070),
    # 27B: the default rule for 64 target layers, 5 draft layers
    "Qwen3.5-27B-DFlash": zlab_drafter(5120, 17408, 5, [1, 16, 31, 46, 61], 248070),
    "Qwen3.5-35B-A3B-DFlash": zlab_drafter(2048, 6144, 8, [1, 10, 19, 28, 37], 248070, kv=4),
    # [S,S,S,S,F], SWA 2048, causal (ECOSYSTEM §1.1)
    "Qwen3.6-27B-DFlash": zlab_drafter(5120, 17408, 5, [1, 16, 31, 46, 61], 248070,
                                       layer_types=["sliding_attention"] * 4 + ["full_attention"],
                                       sliding=2048, causal=True),
    # current rev: 6 layers, 8 taps, mask 248077, 5x SWA@4096 + 1 full, H 2048, I 6144
    "Qwen3.6-35B-A3B-DFlash": zlab_drafter(2048, 6144, 6, [1, 6, 11, 16, 22, 27, 32, 37], 248077,
                                           layer_types=["sliding_attention"] * 5 + ["full_attention"],
                                           sliding=4096, causal=True),
    # vLLM speculators dialect (RedHatAI Qwen3.6-35B, ECOSYSTEM §1.3): aux = z-lab ids + 1
    "Qwen3.6-35B-A3B-speculator.dflash": {
        "architectures": ["DFlashSpeculator"], "speculators_model_type": "dflash",
        "aux_hidden_state_layer_ids": [1, 10, 19, 28, 37], "mask_token_id": 248077,
        "block_size": 16, "draft_vocab_size": 32000, "sliding_window_non_causal": False,
        "sample_from_anchor": False,
        "speculators_config": {"verifier": {"name_or_path": "Qwen/Qwen3.6-35B-A3B",
                                            "architectures": [M]}},
        "transformer_layer_config": {
            "model_type": "qwen3", "hidden_size": 2048, "intermediate_size": 6144,
            "num_hidden_layers": 5, "num_attention_heads": 32, "num_key_value_heads": 4,
            "head_dim": 128, "vocab_size": 248320, "rms_norm_eps": 1e-6,
            "rope_theta": 10000000.0, "max_position_embeddings": 262144,
            "hidden_act": "silu", "tie_word_embeddings": False}},
    # eagle_aux_hidden_state_layer_ids (aux semantics as-is) + top-level causal (Laguna style)
    "eagle-aux-causal-drafter": dict(
        zlab_drafter(2048, 6144, 5, [0], 248077,
                     layer_types=["sliding_attention"] * 5, sliding=512),
        eagle_aux_hidden_state_layer_ids=[2, 11, 20, 29, 38], causal=True),
}


def main() -> None:
    for name, cfg in {**TARGETS, **DRAFTERS}.items():
        d = OUT / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (OUT / "SOURCES.md").write_text(
        "config.json files assembled from public values by tools/ref/make_hybrid_configs.py\n"
        "(TARGETS-SPEC.md §5.1 for Qwen3.5-27B / 35B-A3B; ECOSYSTEM-2026-12.md §4 for 4B / 9B sizes,\n"
        "§1.1 for the z-lab drafters, §1.3 for the speculators dialect). Not downloaded files: the\n"
        "Qwen3.6 / 3.8 targets reuse the Qwen3.5 text configs of the same size (same model_type);\n"
        "the 4B / 27B / 35B z-lab drafter widths and the 9B layer count follow the family where no\n"
        "value was published. Configs only (no weights).\n")
    print(f"wrote {len(TARGETS) + len(DRAFTERS)} configs under {OUT}")


if __name__ == "__main__":
    main()
