#!/usr/bin/env python3
"""Random-weight benchmark checkpoints with the real shapes of Qwen3-0.6B / 1.7B / 4B, a 5-layer
DFlash drafter for each (hidden size = the target's, taps = the z-lab default rule), and a
scaled-down MiMo-V2-shaped MoE.

Shapes, not values, set the speed of a dense forward pass, so the weights are random (a fixed
pool of N(0, 0.02) bf16 values tiled with a random offset per tensor: fast to write, and every
tensor still has its own bytes in the file). Nothing here is committed: the default output folder
is /tmp/dflash-bench-models (several GB; the 4B target alone is ~8 GB).

    python3 tools/ref/make_bench_models.py [OUT_DIR] [--only 0.6b,1.7b,4b,mimo] [--force]

Writes OUT_DIR/{qwen3-0.6b, qwen3-0.6b-dflash, qwen3-1.7b, qwen3-1.7b-dflash, qwen3-4b,
qwen3-4b-dflash, mimo-moe-small}/ with config.json + model.safetensors. The safetensors files
are written directly (header + raw little-endian data), so only numpy is needed.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

VOCAB = 151936
MASK_TOKEN_ID = 151669  # Qwen3 DFlash drafters: <|MASK|>-style id just past the specials
POOL = 1 << 24

QWEN3 = {
    # name: (hidden, intermediate, layers, heads, kv_heads, head_dim)
    "0.6b": (1024, 3072, 28, 16, 8, 128),
    "1.7b": (2048, 6144, 28, 16, 8, 128),
    "4b": (2560, 9728, 36, 32, 8, 128),
}
DRAFT_LAYERS = 5
BLOCK_SIZE = 16


def py_round(x):
    return int(round(x))  # Python 3 round = half-to-even, as in the z-lab code


def default_taps(n_target, n_draft):
    if n_draft == 1:
        return [n_target // 2]
    return [py_round(1 + i * (n_target - 4) / (n_draft - 1)) for i in range(n_draft)]


class Writer:
    """Streams tensors into one .safetensors file: the header is computed first from the shapes."""

    def __init__(self, rng):
        self.rng = rng
        vals = rng.standard_normal(POOL + 4096, dtype=np.float32) * 0.02
        self.pool = (vals.view(np.uint32) >> 16).astype(np.uint16)  # truncation to bf16

    def write(self, path, tensors):
        """tensors: list of (name, shape, kind) with kind 'rand' | 'ones' (bf16 either way)."""
        header = {}
        off = 0
        for name, shape, _ in tensors:
            n = int(np.prod(shape)) * 2
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
        header["__metadata__"] = {"format": "pt", "note": "dflash.cpp random bench weights"}
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        tmp = path + ".part"
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for name, shape, kind in tensors:
                n = int(np.prod(shape))
                if kind == "ones":
                    np.full(n, 0x3F80, dtype=np.uint16).tofile(f)
                    continue
                done = 0
                while done < n:  # tile the pool from a random offset
                    o = int(self.rng.integers(0, 4096))
                    m = min(n - done, POOL)
                    self.pool[o:o + m].tofile(f)
                    done += m
        os.replace(tmp, path)
        return off


def dense_layer(p, H, I, nh, nkv, hd, qk_norm=True):
    t = [
        (p + "input_layernorm.weight", [H], "ones"),
        (p + "post_attention_layernorm.weight", [H], "ones"),
        (p + "self_attn.q_proj.weight", [nh * hd, H], "rand"),
        (p + "self_attn.k_proj.weight", [nkv * hd, H], "rand"),
        (p + "self_attn.v_proj.weight", [nkv * hd, H], "rand"),
        (p + "self_attn.o_proj.weight", [H, nh * hd], "rand"),
        (p + "mlp.gate_proj.weight", [I, H], "rand"),
        (p + "mlp.up_proj.weight", [I, H], "rand"),
        (p + "mlp.down_proj.weight", [H, I], "rand"),
    ]
    if qk_norm:
        t += [(p + "self_attn.q_norm.weight", [hd], "ones"), (p + "self_attn.k_norm.weight", [hd], "ones")]
    return t


def qwen3_config(H, I, L, nh, nkv, hd):
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": hd,
        "hidden_act": "silu",
        "hidden_size": H,
        "intermediate_size": I,
        "max_position_embeddings": 40960,
        "max_window_layers": L,
        "num_attention_heads": nh,
        "num_hidden_layers": L,
        "num_key_value_heads": nkv,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB,
    }


def draft_config(H, I, nh, nkv, hd, n_target):
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "attention_bias": False,
        "block_size": BLOCK_SIZE,
        "dflash_config": {"mask_token_id": MASK_TOKEN_ID,
                          "target_layer_ids": default_taps(n_target, DRAFT_LAYERS)},
        "head_dim": hd,
        "hidden_act": "silu",
        "hidden_size": H,
        "intermediate_size": I,
        "layer_types": ["full_attention"] * DRAFT_LAYERS,
        "max_position_embeddings": 40960,
        "num_attention_heads": nh,
        "num_hidden_layers": DRAFT_LAYERS,
        "num_key_value_heads": nkv,
        "num_target_layers": n_target,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB,
    }


def write_model(out, name, config, tensors, w, force):
    d = os.path.join(out, name)
    st = os.path.join(d, "model.safetensors")
    if os.path.exists(st) and not force:
        print(f"{name}: exists, skipped (--force rewrites)")
        return
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    n = w.write(st, tensors)
    print(f"{name}: {n / 1e9:.2f} GB -> {d}")


def make_qwen3(out, key, w, force):
    H, I, L, nh, nkv, hd = QWEN3[key]
    t = [("model.embed_tokens.weight", [VOCAB, H], "rand"), ("model.norm.weight", [H], "ones")]
    for il in range(L):
        t += dense_layer(f"model.layers.{il}.", H, I, nh, nkv, hd)
    write_model(out, f"qwen3-{key}", qwen3_config(H, I, L, nh, nkv, hd), t, w, force)
    taps = default_taps(L, DRAFT_LAYERS)
    dt = [("fc.weight", [H, len(taps) * H], "rand"), ("hidden_norm.weight", [H], "ones"),
          ("norm.weight", [H], "ones")]
    for il in range(DRAFT_LAYERS):
        dt += dense_layer(f"layers.{il}.", H, I, nh, nkv, hd)
    write_model(out, f"qwen3-{key}-dflash", draft_config(H, I, nh, nkv, hd, L), dt, w, force)


def make_qwen35_4b(out, w, force):
    """Qwen3.5-4B text shape (ECOSYSTEM §4): hidden 2560, I 9216, 32 layers (linear ×3 + full),
    gated attention 16/4 heads of 256, GDN 16 key / 32 value heads of 128, tied, vocab 248320."""
    H, I, L, nh, nkv, hd = 2560, 9216, 32, 16, 4, 256
    hk, hv, dk = 16, 32, 128
    C = 2 * hk * dk + hv * dk
    t = [("model.embed_tokens.weight", [248320, H], "rand"), ("model.norm.weight", [H], "ones")]
    for il in range(L):
        p = f"model.layers.{il}."
        t += [(p + "input_layernorm.weight", [H], "ones"),
              (p + "post_attention_layernorm.weight", [H], "ones"),
              (p + "mlp.gate_proj.weight", [I, H], "rand"), (p + "mlp.up_proj.weight", [I, H], "rand"),
              (p + "mlp.down_proj.weight", [H, I], "rand")]
        if (il + 1) % 4:
            q = p + "linear_attn."
            t += [(q + "in_proj_qkv.weight", [C, H], "rand"), (q + "in_proj_z.weight", [hv * dk, H], "rand"),
                  (q + "in_proj_a.weight", [hv, H], "rand"), (q + "in_proj_b.weight", [hv, H], "rand"),
                  (q + "conv1d.weight", [C, 1, 4], "rand"), (q + "A_log", [hv], "ones"),
                  (q + "dt_bias", [hv], "ones"), (q + "norm.weight", [dk], "ones"),
                  (q + "out_proj.weight", [H, hv * dk], "rand")]
        else:
            t += [(p + "self_attn.q_proj.weight", [2 * nh * hd, H], "rand"),
                  (p + "self_attn.k_proj.weight", [nkv * hd, H], "rand"),
                  (p + "self_attn.v_proj.weight", [nkv * hd, H], "rand"),
                  (p + "self_attn.o_proj.weight", [H, nh * hd], "rand"),
                  (p + "self_attn.q_norm.weight", [hd], "ones"), (p + "self_attn.k_norm.weight", [hd], "ones")]
    cfg = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "hidden_size": H,
           "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": nh,
           "num_key_value_heads": nkv, "head_dim": hd, "attn_output_gate": True,
           "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)],
           "linear_num_key_heads": hk, "linear_num_value_heads": hv, "linear_key_head_dim": dk,
           "linear_value_head_dim": dk, "linear_conv_kernel_dim": 4, "vocab_size": 248320,
           "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "max_position_embeddings": 262144,
           "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
           "hidden_act": "silu", "dtype": "bfloat16"}
    write_model(out, "qwen35-4b", cfg, t, w, force)


def make_mimo(out, w, force):
    """MiMo-V2-Flash layout (TARGETS-SPEC §3) scaled down: hidden 1024, 12 layers (full every
    6th, the rest SWA 128 with sinks), 64 experts × 256 top-8, dense layer 0, bf16 weights."""
    H, L, V = 1024, 12, VOCAB
    nh, nkv_full, nkv_swa, hd, vd = 16, 4, 8, 192, 128
    E, k, Im, Id = 64, 8, 256, 4096
    pattern = [0 if (i == 0 or i % 6 == 5) else 1 for i in range(L)]
    cfg = {
        "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash",
        "torch_dtype": "bfloat16", "hidden_size": H, "num_hidden_layers": L, "vocab_size": V,
        "max_position_embeddings": 32768,
        "num_attention_heads": nh, "num_key_value_heads": nkv_full, "head_dim": hd, "v_head_dim": vd,
        "swa_num_attention_heads": nh, "swa_num_key_value_heads": nkv_swa, "swa_head_dim": hd,
        "swa_v_head_dim": vd, "rope_theta": 5000000, "swa_rope_theta": 10000,
        "partial_rotary_factor": 0.334, "sliding_window": 128, "sliding_window_size": 128,
        "attention_chunk_size": 128, "hybrid_layer_pattern": pattern,
        "moe_layer_freq": [0] + [1] * (L - 1), "intermediate_size": Id, "moe_intermediate_size": Im,
        "n_routed_experts": E, "num_experts_per_tok": k, "n_shared_experts": None,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1,
        "norm_topk_prob": True, "routed_scaling_factor": None, "hidden_act": "silu",
        "layernorm_epsilon": 1e-5, "attention_bias": False, "attention_value_scale": 0.707,
        "add_swa_attention_sink_bias": True, "add_full_attention_sink_bias": False,
        "tie_word_embeddings": False,
    }
    t = [("model.embed_tokens.weight", [V, H], "rand"), ("model.norm.weight", [H], "ones"),
         ("lm_head.weight", [V, H], "rand")]
    for il in range(L):
        p = f"model.layers.{il}."
        swa = pattern[il] == 1
        nkv = nkv_swa if swa else nkv_full
        t += [(p + "input_layernorm.weight", [H], "ones"),
              (p + "post_attention_layernorm.weight", [H], "ones"),
              (p + "self_attn.q_proj.weight", [nh * hd, H], "rand"),
              (p + "self_attn.k_proj.weight", [nkv * hd, H], "rand"),
              (p + "self_attn.v_proj.weight", [nkv * vd, H], "rand"),
              (p + "self_attn.o_proj.weight", [H, nh * vd], "rand")]
        if swa:
            t.append((p + "self_attn.attention_sink_bias", [nh], "rand"))
        if il == 0:
            t += [(p + "mlp.gate_proj.weight", [Id, H], "rand"), (p + "mlp.up_proj.weight", [Id, H], "rand"),
                  (p + "mlp.down_proj.weight", [H, Id], "rand")]
        else:
            t += [(p + "mlp.gate.weight", [E, H], "rand"),
                  (p + "mlp.gate.e_score_correction_bias", [E], "rand")]
            for e in range(E):
                q = p + f"mlp.experts.{e}."
                t += [(q + "gate_proj.weight", [Im, H], "rand"), (q + "up_proj.weight", [Im, H], "rand"),
                      (q + "down_proj.weight", [H, Im], "rand")]
    write_model(out, "mimo-moe-small", cfg, t, w, force)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default="/tmp/dflash-bench-models")
    ap.add_argument("--only", default="0.6b,1.7b,4b,mimo",
                    help="comma list of 0.6b,1.7b,4b,mimo,qwen35-4b")
    ap.add_argument("--force", action="store_true", help="rewrite existing models")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    repo = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if os.path.realpath(a.out).startswith(repo + os.sep):
        sys.exit("refusing to write multi-GB benchmark models inside the repository")
    w = Writer(np.random.default_rng(a.seed))
    for key in a.only.split(","):
        key = key.strip().lower()
        if key in QWEN3:
            make_qwen3(a.out, key, w, a.force)
        elif key == "mimo":
            make_mimo(a.out, w, a.force)
        elif key == "qwen35-4b":
            make_qwen35_4b(a.out, w, a.force)
        else:
            sys.exit(f"unknown model '{key}' (choose from 0.6b, 1.7b, 4b, mimo)")


if __name__ == "__main__":
    main()
