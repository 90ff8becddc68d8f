#!/usr/bin/env python3
"""A GGUF copy of a random-weight Qwen3 benchmark folder (tools/ref/make_bench_models.py), written
with gguf-py the way llama.cpp's converter lays out a `qwen3` file: `qwen3.*` metadata, tensor
names blk.N.attn_q.weight ..., no vocabulary (tokenizer.ggml.model = "none": llama-bench and
`dflash bench` feed token ids). For benchmarks only (the weights are random).

    python3 tools/bench/write_bench_gguf.py HF_FOLDER OUT.gguf --type bf16|f16|q8_0
Needs: numpy, gguf (PyPI, or a llama.cpp copy's gguf-py on PYTHONPATH).
"""
from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import quantize

NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
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


def gguf_name(hf: str) -> str:
    if hf in NAMES:
        return NAMES[hf]
    parts = hf.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf
    return f"blk.{parts[2]}.{LAYER['.'.join(parts[3:])]}"


def read_safetensors(path: Path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "BF16":
            arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F32":
            arr = raw.view(np.float32)
        else:
            raise SystemExit(f"{name}: dtype {info['dtype']} not handled")
        yield name, arr.reshape(info["shape"]), raw.view(np.uint16) if info["dtype"] == "BF16" else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--type", choices=["bf16", "f16", "q8_0"], required=True)
    args = ap.parse_args()
    cfg = json.loads((args.folder / "config.json").read_text())
    assert cfg["architectures"][0] == "Qwen3ForCausalLM", cfg["architectures"]
    w = gguf.GGUFWriter(str(args.out), "qwen3")
    w.add_name(args.folder.name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg.get("max_position_embeddings", 40960))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg.get("rope_theta", 1000000.0))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
    w.add_file_type({"bf16": gguf.LlamaFileType.MOSTLY_BF16, "f16": gguf.LlamaFileType.MOSTLY_F16,
                     "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[args.type])
    w.add_vocab_size(cfg["vocab_size"])  # llama.cpp sizes token_embd from it when there is no vocab
    w.add_tokenizer_model("none")
    for name, arr, bf16 in read_safetensors(args.folder / "model.safetensors"):
        g = gguf_name(name)
        if arr.ndim == 1:
            w.add_tensor(g, arr.astype(np.float32))
        elif args.type == "bf16":
            w.add_tensor(g, np.ascontiguousarray(bf16).view(np.uint8).reshape(arr.shape[0], -1),
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif args.type == "f16":
            w.add_tensor(g, np.ascontiguousarray(arr, dtype=np.float16))
        else:
            q = quantize(np.ascontiguousarray(arr, dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(g, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
