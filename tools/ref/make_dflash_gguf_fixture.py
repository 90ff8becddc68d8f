#!/usr/bin/env python3
"""The zlab_full fixture drafter written as a llama.cpp `dflash` GGUF (gguf-py), so the GGUF drafter
path can be checked against the safetensors one (same fp32 weights → same drafts, bit for bit).

The layout follows llama.cpp's converter for DFlash drafters: general.architecture = "dflash",
dflash.* hyper-parameters, dflash.target_layers stored +1-shifted, the mask id on
tokenizer.ggml.mask_token_id, tensors fc / hidden_norm / output_norm / blk.N.{attn_norm, attn_q,
attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down}, no
token_embd / output (shared with the target).

  python3 tools/ref/make_dflash_gguf_fixture.py      (needs numpy, safetensors, gguf)
"""
import json
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "tests/fixtures/dflash/zlab_full/draft"
OUT = REPO / "tests/fixtures/dflash/zlab_full_gguf/draft.gguf"

LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(name: str) -> str:
    top = {"fc.weight": "fc.weight", "hidden_norm.weight": "hidden_norm.weight", "norm.weight": "output_norm.weight"}
    if name in top:
        return top[name]
    _, il, rest = name.split(".", 2)  # layers.{il}.rest
    return f"blk.{il}.{LAYER[rest]}"


def main():
    cfg = json.loads((SRC / "config.json").read_text())
    tensors = load_file(str(SRC / "model.safetensors"))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(OUT), arch="dflash")
    w.add_uint32("dflash.embedding_length", cfg["hidden_size"])
    w.add_uint32("dflash.block_count", cfg["num_hidden_layers"])
    w.add_uint32("dflash.feed_forward_length", cfg["intermediate_size"])
    w.add_uint32("dflash.attention.head_count", cfg["num_attention_heads"])
    w.add_uint32("dflash.attention.head_count_kv", cfg["num_key_value_heads"])
    w.add_uint32("dflash.attention.key_length", cfg["head_dim"])
    w.add_uint32("dflash.attention.value_length", cfg["head_dim"])
    w.add_float32("dflash.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    w.add_float32("dflash.rope.freq_base", cfg["rope_theta"])
    w.add_uint32("dflash.context_length", cfg["max_position_embeddings"])
    w.add_uint32("dflash.block_size", cfg["block_size"])
    w.add_array("dflash.target_layers", [t + 1 for t in cfg["dflash_config"]["target_layer_ids"]])
    w.add_uint32("tokenizer.ggml.mask_token_id", cfg["dflash_config"]["mask_token_id"])
    for name in sorted(tensors):
        w.add_tensor(gguf_name(name), np.ascontiguousarray(tensors[name].astype(np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{OUT.relative_to(REPO)}: {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
