#!/usr/bin/env python3
"""The tiny Gemma 4 checkpoints (tests/fixtures/gemma4, make_gemma4_fixtures.py) written as GGUF
the way llama.cpp's converter writes `gemma4` (convert_hf_to_gguf.py Gemma4Model, read for the
facts: key_length = global_head_dim and key_length_swa = head_dim, head_count_kv per layer,
sliding_window_pattern one bool per layer, rope.freq_base = the global theta, a rope_freqs
tensor of 1 / 1e30 factors for the proportional RoPE, norms unshifted, layer_scalar →
layer_output_scale, router.scale → ffn_gate_inp.scale, per_expert_scale → ffn_down_exps.scale),
with gguf-py 0.19 (tensor names from gguf.get_tensor_name_map(MODEL_ARCH.GEMMA4), quantization by
gguf.quants), and goldens from transformers on the DEQUANTIZED weights.

Writes tests/fixtures/gemma4/gguf/<name>/model.gguf and tests/fixtures/gemma4/gguf/<name>.golden.safetensors
(same tensors as the safetensors goldens):
  dense_quant  dense_v5 with token_embd / attention / ffn_down Q8_0 and ffn_gate / ffn_up Q5_0
               (widths 64 and 96 allow 32-blocks only: no K-quants at this size)
  moe_quant    moe_hub with the fused 3-D experts Q8_0, the dense branch Q5_0 / Q5_1, attention
               and router F32
  dense_kquant a 6-layer hidden-256 dense model built by this script (same recipe, seed 6301):
               Q4_K / Q5_K / Q6_K matrices, Q6_K token_embd (as in the real Q4_K_M files)

Run after make_gemma4_fixtures.py:  python3 tools/ref/make_gemma4_gguf_fixtures.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import fixture_common as fc  # noqa: E402
import make_gemma4_fixtures as g4  # noqa: E402
from make_qwen3_fixtures import GREEDY_STEPS  # noqa: E402

OUT = fc.FIXTURES / "gemma4" / "gguf"
VARIANTS = {
    "dense_quant": dict(src="dense_v5", quant={"token_embd": Q.Q8_0, "attn_q": Q.Q8_0, "attn_k": Q.Q8_0,
                                               "attn_v": Q.Q8_0, "attn_output": Q.Q8_0,
                                               "ffn_down": Q.Q8_0, "ffn_gate": Q.Q5_0, "ffn_up": Q.Q5_0}),
    "moe_quant": dict(src="moe_hub", quant={"ffn_gate_up_exps": Q.Q8_0, "ffn_down_exps": Q.Q8_0,
                                            "ffn_gate": Q.Q5_0, "ffn_up": Q.Q5_0, "ffn_down": Q.Q5_1}),
    # Built here (not saved as safetensors): hidden 256 so that K-quant 256-blocks fit.
    "dense_kquant": dict(src=None, build=dict(layers=6, seed=6301, moe=False, multimodal=False, hub=False, std=0.075,
                                              geometry=dict(hidden_size=256, intermediate_size=256,
                                                            head_dim=64, global_head_dim=128)),
                         quant={"token_embd": Q.Q6_K, "attn_q": Q.Q4_K, "attn_k": Q.Q4_K, "attn_v": Q.Q6_K,
                                "attn_output": Q.Q5_K, "ffn_gate": Q.Q4_K, "ffn_up": Q.Q4_K,
                                "ffn_down": Q.Q6_K}),
}


def text_cfg(cfg: dict) -> dict:
    return cfg.get("text_config", cfg)


def gguf_name(tmap, hf: str) -> str:
    """llama.cpp's converter naming: special cases first, then gguf-py's tensor map."""
    name = hf.replace("model.language_model.", "model.")
    bid = name.split(".")[2] if name.startswith("model.layers.") else None
    if name.endswith("router.scale"):
        return f"blk.{bid}.ffn_gate_inp.scale"
    if name.endswith("router.per_expert_scale"):
        return f"blk.{bid}.ffn_down_exps.scale"
    if name.endswith("layer_scalar") or (".experts." in name and not name.endswith(".weight")):
        name += ".weight"
    out = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
    assert out is not None, hf
    return out


K_TYPES = (Q.Q4_K, Q.Q5_K, Q.Q6_K)


def random_k(qt, x: np.ndarray, rng) -> np.ndarray:
    """gguf-py has no K-quant quantizer: random K blocks (every bit pattern) whose super-block
    scales give weights of x's spread; the reference is gguf-py's dequantization of them."""
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    n_blocks = x.size // be
    b = rng.integers(0, 256, size=(n_blocks, bb), dtype=np.uint8)
    spread = float(x.std())
    f16 = lambda v: v.astype(np.float16).view(np.uint8).reshape(v.shape + (2,))  # noqa: E731
    if qt == Q.Q6_K:   # w = d · scale_i8 · (q6 − 32): |scale| ≤ 128, |q − 32| ≤ 32
        b[:, 208:210] = f16(rng.uniform(0.5, 1.5, n_blocks).astype(np.float32) * spread / (64 * 18))
    else:              # w = d · sc6 · q − dmin · m6: sc, m ≤ 63, q ≤ 15 (Q4) / 31 (Q5)
        qmax = 15 if qt == Q.Q4_K else 31
        d = rng.uniform(0.5, 1.5, n_blocks).astype(np.float32) * spread * 3.5 / (32 * qmax)
        b[:, 0:2] = f16(d)
        b[:, 2:4] = f16(d * qmax / 2)
    return b.reshape(x.shape[:-1] + (x.shape[-1] // be * bb,))


def write_gguf(path: Path, tc: dict, tensors: dict[str, np.ndarray], quant: dict) -> dict[str, np.ndarray]:
    """Writes the file; returns the tensors as the file holds them, dequantized (HF names)."""
    rng = np.random.default_rng(4242)
    L = tc["num_hidden_layers"]
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA4, L)
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_context_length(tc["max_position_embeddings"])
    w.add_embedding_length(tc["hidden_size"])
    w.add_block_count(L)
    w.add_feed_forward_length(tc["intermediate_size"])
    w.add_head_count(tc["num_attention_heads"])
    w.add_layer_norm_rms_eps(tc["rms_norm_eps"])
    w.add_rope_freq_base(tc["rope_parameters"]["full_attention"]["rope_theta"])
    w.add_final_logit_softcapping(tc["final_logit_softcapping"])
    w.add_sliding_window(tc["sliding_window"])
    w.add_shared_kv_layers(tc["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(tc.get("hidden_size_per_layer_input") or 0)
    swa = [t == "sliding_attention" for t in tc["layer_types"]]
    w.add_sliding_window_pattern(swa)
    hd_full, hd_swa = tc["global_head_dim"], tc["head_dim"]
    w.add_key_length(hd_full)
    w.add_value_length(hd_full)
    w.add_key_length_swa(hd_swa)
    w.add_value_length_swa(hd_swa)
    w.add_head_count_kv([tc["num_key_value_heads"] if s else tc["num_global_key_value_heads"] for s in swa])
    w.add_rope_dimension_count(hd_full)
    w.add_rope_dimension_count_swa(hd_swa)
    if tc.get("enable_moe_block"):
        w.add_expert_count(tc["num_experts"])
        w.add_expert_used_count(tc["top_k_experts"])
        w.add_expert_feed_forward_length(tc["moe_intermediate_size"])
    prf = tc["rope_parameters"]["full_attention"]["partial_rotary_factor"]
    n_rot = int(hd_full * prf / 2)
    w.add_tensor("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (hd_full // 2 - n_rot), np.float32))
    held = {}
    for hf, t in tensors.items():
        name = gguf_name(tmap, hf)
        kind = name.split(".")[-2] if name.startswith("blk.") else name.split(".")[0]
        x = t.astype(np.float32)
        qt = quant.get(kind)
        if qt is not None and x.ndim in (2, 3):
            q = quantize(x, qt) if qt not in K_TYPES else random_k(qt, x, rng)
            w.add_tensor(name, q, raw_dtype=qt)
            held[hf] = dequantize(q, qt).astype(np.float32).reshape(x.shape)
        else:
            w.add_tensor(name, x)
            held[hf] = x
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return held


def main():
    fc.setup_determinism()
    tok = fc.build_tokenizer()
    for name, spec in VARIANTS.items():
        if len(sys.argv) > 1 and name not in sys.argv[1:]:
            continue
        if spec["src"] is None:  # build the checkpoint in a scratch folder (not committed)
            import tempfile
            src = Path(tempfile.mkdtemp(prefix="gemma4_kquant_"))
            m = g4.build_model(tok.get_vocab_size(), fc.token_ids(tok), spec["build"], spec["build"]["seed"])
            m.save_pretrained(str(src))
            from make_qwen3_fixtures import PROMPT_LONG
            fc.save_safetensors({"prompt_ids": fc.i32(torch.tensor(tok.encode(PROMPT_LONG).ids))},
                                src / "golden.safetensors")
        else:
            src = fc.FIXTURES / "gemma4" / spec["src"]
        cfg = json.loads((src / "config.json").read_text())
        tc = text_cfg(cfg)
        if "global_head_dim" not in tc:  # transformers 5.24 layout: per_layer_config
            plc = tc["per_layer_config"]
            first = plc[sorted(plc, key=int)[0]]
            tc = dict(tc, global_head_dim=first["head_dim"], num_global_key_value_heads=first["num_key_value_heads"])
        sd = {k: v for k, v in load_file(str(src / "model.safetensors")).items()}
        folder = fc.fresh_dir(OUT / name)
        held = write_gguf(folder / "model.gguf", tc, {k: v.numpy() for k, v in sd.items()}, spec["quant"])
        # The reference: the same transformers model with the weights the file holds.
        from transformers import AutoConfig
        cls = __import__("transformers").Gemma4ForConditionalGeneration if "text_config" in cfg \
            else __import__("transformers").Gemma4ForCausalLM
        model = cls.from_pretrained(str(src), dtype=torch.float32, attn_implementation="eager")
        for c in (model.config, getattr(model.config, "text_config", None)):
            if c is not None:
                c._experts_implementation = "eager"
        with torch.no_grad():
            params = dict(model.named_parameters())
            params.update(dict(model.named_buffers()))
            for hf, x in held.items():
                params[hf].copy_(torch.from_numpy(x).reshape(params[hf].shape))
        model.eval()
        prompt = load_file(str(src / "golden.safetensors"))["prompt_ids"].long()[None]
        g_ids, g_logits = g4.greedy_cached(model, prompt, GREEDY_STEPS)
        logits, embed, layer_out = g4.forward_capture(model, prompt)
        gaps = fc.top2_gap(g_logits)
        golden = {"prompt_ids": fc.i32(prompt[0]), "logits": fc.f32(logits), "embed": fc.f32(embed),
                  "layer_out": fc.f32(layer_out), "greedy_ids": fc.i32(g_ids), "greedy_logits": fc.f32(g_logits)}
        fc.save_safetensors(golden, OUT / f"{name}.golden.safetensors",
                            metadata={"reference": f"transformers {__import__('transformers').__version__} "
                                      f"{cls.__name__} on the gguf-py-dequantized weights of {name}/model.gguf",
                                      "min_top2_gap": f"{float(gaps.min()):.6f}"})
        print(f"gemma4/gguf/{name}: {sum(1 for _ in held)} tensors, min gap {float(gaps.min()):.3e}, "
              f"{(folder / 'model.gguf').stat().st_size / 1024:.0f} KiB")
        if spec["src"] is None:
            import shutil
            shutil.rmtree(src)


if __name__ == "__main__":
    main()
