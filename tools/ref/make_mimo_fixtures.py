#!/usr/bin/env python3
"""Tiny random MiMo-V2-Flash / MiMo-V2.5 checkpoints in FP8 + block scales, with golden data from
Hugging Face transformers' in-library MiMo (`transformers.models.mimo_v2_flash`, the oracle), and a
MiMo-style DFlash drafter for the split target (goldens from tools/ref/dflash_ref.py).

Writes tests/fixtures/mimo/<name>/ (config.json in the published hub layout, safetensors shards +
index, tokenizer files, golden.safetensors, golden.json) and tests/fixtures/mimo/dflash/.

How the FP8 fixtures are made (docs/MIMO.md):
  1. build MiMoV2FlashForCausalLM (fp32, eager) with random weights;
  2. quantize every projection to F8_E4M3 with 128x128 block scales exactly as the published
     checkpoints do: q/k/v (or the fused qkv_proj) PER TENSOR-PARALLEL SHARD with ceil-divided
     grids (ckpt_tp = num_key_value_heads), everything else with one grid per tensor;
  3. write the DEQUANTIZED values back into the HF model, so HF computes with exactly the weights
     an engine gets from FP8 x scale (the golden is HF's math on the checkpoint's values);
  4. norms / embedding (and V2.5 sinks) are rounded to bf16, the stored dtype.
Run from the repo root:  python3 tools/ref/make_mimo_fixtures.py
Deterministic (CPU, one thread, fixed seeds).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import dflash_ref  # noqa: E402
import fixture_common as fc  # noqa: E402
import make_dflash_fixtures as mdf  # noqa: E402

GREEDY_STEPS = 32
MIN_GAP = 5e-3
BLOCK = 128
FP8_MAX = 448.0
PROMPT = "The quick brown fox jumps over the lazy dog."          # 22 tokens

# Common tiny geometry: hidden 64, 8 query heads, kv 2 (full) / 4 (sliding, HF hard-codes 2x),
# head_dim 24 / v_head_dim 16, partial_rotary_factor 0.334 -> int(24*0.334) = 8 rotated dims,
# window 6, 8 experts top-2 x 16, dense layer 0 with intermediate 192 (a partial 2nd 128-block).
BASE = dict(hidden=64, layers=5, heads=8, kv=2, swa_kv=4, head_dim=24, v_head_dim=16,
            pattern=[0, 1, 1, 0, 1], moe_freq=[0, 1, 1, 1, 1], window=6, inter=192,
            moe_inter=16, experts=8, topk=2, theta=5e6, swa_theta=1e4, prf=0.334, vscale=0.707,
            eps=1e-5)

FIXTURES = {
    # MiMo-V2-Flash: split q/k/v, sinks stored F32, n_group = topk_group = 1, scaling null.
    "flash_split": dict(BASE, layout="split", seed=11001, prompt=PROMPT, n_group=1, topk_group=1,
                        scaling=None, sink_dtype=torch.float32),
    # MiMo-V2.5: fused qkv_proj (kv-head-count shards of [Q;K;V], per-shard scale grids), sinks
    # stored BF16; group-limited routing and a routed scaling factor exercise the general router.
    "v25_fused": dict(BASE, layout="fused", seed=12001, prompt=PROMPT, n_group=4, topk_group=2,
                      scaling=1.5, sink_dtype=torch.bfloat16),
}

DRAFT = dict(target="flash_split", layers=2, taps=[0, 2, 4], block=8, seed=13001,
             cfg={"rms_norm_eps": 1e-05, "intermediate_size": 32, "partial_rotary_factor": 0.5, "v_head_dim": 16,
                  "sliding_window": None, "use_sliding_window": False},
             dflash={"use_swa": True, "swa_window_size": 4, "attention_sink_bias": True,
                     "attention_value_scale": 0.612, "backbone_rotary_base": 5000000.0})


# ---------------------------------------------------------------------------------------------
# FP8 block quantization (DeepSeek-V3 convention: weight_scale_inv multiplies the stored value)
# ---------------------------------------------------------------------------------------------

def quant_block_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [R, C] fp32 -> (fp8 [R, C], scale_inv [ceil(R/128), ceil(C/128)] fp32)."""
    R, C = w.shape
    gr, gc = math.ceil(R / BLOCK), math.ceil(C / BLOCK)
    q = torch.empty(R, C, dtype=torch.float8_e4m3fn)
    s = torch.empty(gr, gc, dtype=torch.float32)
    for i in range(gr):
        for j in range(gc):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK].float()
            sc = (blk.abs().max().clamp(min=1e-12) / FP8_MAX).float()
            s[i, j] = sc
            q[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = (blk / sc).clamp(-FP8_MAX, FP8_MAX).to(
                torch.float8_e4m3fn)
    return q, s


def dequant_block_fp8(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    R, C = q.shape
    full = s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:R, :C]
    return q.float() * full


def quant_sharded(w: torch.Tensor, shards: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-shard grids (ceil per shard), concatenated: (fp8, scale_inv, dequantized)."""
    qs, ss, ds = [], [], []
    for part in w.chunk(shards, 0):
        q, s = quant_block_fp8(part)
        qs.append(q)
        ss.append(s)
        ds.append(dequant_block_fp8(q, s))
    return torch.cat(qs, 0), torch.cat(ss, 0), torch.cat(ds, 0)


def bf16_round(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(torch.float32)


# ---------------------------------------------------------------------------------------------
# HF model
# ---------------------------------------------------------------------------------------------

def hf_config(spec: dict, vocab: int, window: int | None = None):
    from transformers import MiMoV2FlashConfig
    lt = ["sliding_attention" if p else "full_attention" for p in spec["pattern"]]
    mt = ["sparse" if f else "dense" for f in spec["moe_freq"]]
    assert spec["swa_kv"] == 2 * spec["kv"], "transformers' MiMo hard-codes swa kv heads = 2 x kv heads"
    cfg = MiMoV2FlashConfig(
        vocab_size=vocab, hidden_size=spec["hidden"], intermediate_size=spec["inter"],
        num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"], num_key_value_heads=spec["kv"],
        head_dim=spec["head_dim"], v_head_dim=spec["v_head_dim"], sliding_window=window or spec["window"],
        layer_types=lt, mlp_layer_types=mt,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": spec["theta"],
                               "partial_rotary_factor": spec["prf"]},
            "sliding_attention": {"rope_type": "default", "rope_theta": spec["swa_theta"],
                                  "partial_rotary_factor": spec["prf"]}},
        moe_intermediate_size=spec["moe_inter"], n_routed_experts=spec["experts"],
        num_experts_per_tok=spec["topk"], n_group=spec["n_group"], topk_group=spec["topk_group"],
        norm_topk_prob=True, routed_scaling_factor=spec["scaling"], rms_norm_eps=spec["eps"],
        attention_value_scale=spec["vscale"], max_position_embeddings=512, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "eager"
    return cfg


def build_hf(spec: dict, vocab: int, seed: int):
    from transformers import MiMoV2FlashForCausalLM
    torch.manual_seed(seed)
    model = MiMoV2FlashForCausalLM(hf_config(spec, vocab)).to(torch.float32).eval()
    model.config._attn_implementation = "eager"
    fc.random_init_(model, seed, std=0.15, norm_jitter=0.1)
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            a = layer.self_attn
            if a.sinks is not None:
                a.sinks.copy_(0.5 + torch.randn(a.sinks.shape, generator=g, dtype=torch.float64).float())
            if spec["moe_freq"][i]:
                b = layer.mlp.gate.e_score_correction_bias
                b.copy_(0.2 * torch.randn(b.shape, generator=g, dtype=torch.float64).float())
                # Router scores should not saturate: smaller router weights.
                layer.mlp.gate.weight.mul_(0.5)
    return model


def quantize_into(model, spec: dict) -> dict[str, torch.Tensor]:
    """FP8-quantizes the projections, writes the dequantized values into the HF model and returns
    the checkpoint tensors (hub names)."""
    ck: dict[str, torch.Tensor] = {}
    H, nh, hd, vd = spec["hidden"], spec["heads"], spec["head_dim"], spec["v_head_dim"]
    ckpt_tp = spec["kv"]  # the export's TP size = num_key_value_heads of the full layers
    sink_dtype = spec["sink_dtype"]

    def put_fp8(name: str, q: torch.Tensor, s: torch.Tensor):
        ck[name + ".weight"] = q
        ck[name + ".weight_scale_inv"] = s

    with torch.no_grad():
        emb = bf16_round(model.model.embed_tokens.weight)
        model.model.embed_tokens.weight.copy_(emb)
        ck["model.embed_tokens.weight"] = emb.to(torch.bfloat16)
        nw = bf16_round(model.model.norm.weight)
        model.model.norm.weight.copy_(nw)
        ck["model.norm.weight"] = nw.to(torch.bfloat16)
        # lm_head is stored F16 in the tiny fixture, not bf16 (docs/MIMO.md: bf16 weights make the
        # AVX-512 BF16 matmul round activations to bf16, which a tiny-margin golden cannot absorb;
        # F16 weights are multiplied in fp32).
        lm = model.lm_head.weight.detach().to(torch.float16)
        model.lm_head.weight.copy_(lm.float())
        ck["lm_head.weight"] = lm
        for i, layer in enumerate(model.model.layers):
            p = f"model.layers.{i}."
            for nm in ("input_layernorm", "post_attention_layernorm"):
                w = getattr(layer, nm).weight
                w.copy_(bf16_round(w))
                ck[p + nm + ".weight"] = w.detach().to(torch.bfloat16)
            a = layer.self_attn
            swa = spec["pattern"][i] == 1
            nkv = spec["swa_kv"] if swa else spec["kv"]
            if spec["layout"] == "split":
                for nm in ("q_proj", "k_proj", "v_proj"):
                    lin = getattr(a, nm)
                    q, s, d = quant_sharded(lin.weight.detach(), ckpt_tp)
                    lin.weight.copy_(d)
                    put_fp8(p + "self_attn." + nm, q, s)
            else:
                Wq, Wk, Wv = a.q_proj.weight.detach(), a.k_proj.weight.detach(), a.v_proj.weight.detach()
                qs, ks, vs = Wq.chunk(ckpt_tp, 0), Wk.chunk(ckpt_tp, 0), Wv.chunk(ckpt_tp, 0)
                assert Wq.shape[0] == nh * hd and Wk.shape[0] == nkv * hd and Wv.shape[0] == nkv * vd
                fused = torch.cat([torch.cat([qs[j], ks[j], vs[j]], 0) for j in range(ckpt_tp)], 0)
                q, s, d = quant_sharded(fused, ckpt_tp)
                rows_q, rows_k, rows_v = qs[0].shape[0], ks[0].shape[0], vs[0].shape[0]
                dq, dk, dv = [], [], []
                for part in d.chunk(ckpt_tp, 0):
                    dq.append(part[:rows_q])
                    dk.append(part[rows_q:rows_q + rows_k])
                    dv.append(part[rows_q + rows_k:])
                    assert part.shape[0] == rows_q + rows_k + rows_v
                a.q_proj.weight.copy_(torch.cat(dq, 0))
                a.k_proj.weight.copy_(torch.cat(dk, 0))
                a.v_proj.weight.copy_(torch.cat(dv, 0))
                put_fp8(p + "self_attn.qkv_proj", q, s)
            q, s = quant_block_fp8(a.o_proj.weight.detach())
            a.o_proj.weight.copy_(dequant_block_fp8(q, s))
            put_fp8(p + "self_attn.o_proj", q, s)
            if a.sinks is not None:
                sv = a.sinks.detach().to(sink_dtype)
                a.sinks.copy_(sv.float())
                ck[p + "self_attn.attention_sink_bias"] = sv.clone()
            if spec["moe_freq"][i]:
                m = layer.mlp
                ck[p + "mlp.gate.weight"] = m.gate.weight.detach().clone()
                ck[p + "mlp.gate.e_score_correction_bias"] = m.gate.e_score_correction_bias.detach().clone()
                I = spec["moe_inter"]
                for e in range(spec["experts"]):
                    gu = m.experts.gate_up_proj[e].detach()
                    for nm, w, sl in (("gate_proj", gu, slice(0, I)), ("up_proj", gu, slice(I, 2 * I))):
                        q, s = quant_block_fp8(w[sl])
                        m.experts.gate_up_proj[e, sl].copy_(dequant_block_fp8(q, s))
                        put_fp8(p + f"mlp.experts.{e}.{nm}", q, s)
                    q, s = quant_block_fp8(m.experts.down_proj[e].detach())
                    m.experts.down_proj[e].copy_(dequant_block_fp8(q, s))
                    put_fp8(p + f"mlp.experts.{e}.down_proj", q, s)
            else:
                for nm in ("gate_proj", "up_proj", "down_proj"):
                    lin = getattr(layer.mlp, nm)
                    q, s = quant_block_fp8(lin.weight.detach())
                    lin.weight.copy_(dequant_block_fp8(q, s))
                    put_fp8(p + "mlp." + nm, q, s)
    return ck


# ---------------------------------------------------------------------------------------------
# Goldens
# ---------------------------------------------------------------------------------------------

@torch.no_grad()
def forward_capture(model, ids: torch.Tensor):
    """One no-cache forward: logits [n,V], embed [n,H], layer_out [L,n,H], router top-k [L,n,k]."""
    outs, emb, routes = [], [], {}
    hooks = [layer.register_forward_hook(lambda m, a, o: outs.append(o[0] if isinstance(o, tuple) else o))
             for layer in model.model.layers]
    hooks.append(model.model.embed_tokens.register_forward_hook(lambda m, a, o: emb.append(o)))
    for i, layer in enumerate(model.model.layers):
        if hasattr(layer.mlp, "gate"):
            hooks.append(layer.mlp.gate.register_forward_hook(
                lambda m, a, o, i=i: routes.__setitem__(i, o[2])))
    try:
        out = model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    layer_out = torch.stack([o[0] for o in outs], 0)
    n = ids.shape[1]
    k = model.config.num_experts_per_tok
    r = torch.full((len(model.model.layers), n, k), -1, dtype=torch.int32)
    for i, idx in routes.items():
        r[i] = torch.sort(idx.view(n, k), -1).values.to(torch.int32)
    return out.logits[0], emb[0][0], layer_out, r


@torch.no_grad()
def greedy_cached(model, ids: torch.Tensor, steps: int):
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, cache=cache, use_cache=True)
    logits = out.logits[0, -1]
    toks, rows = [], []
    for _ in range(steps):
        t = int(torch.argmax(logits))
        toks.append(t)
        rows.append(logits.clone())
        out = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
        logits = out.logits[0, -1]
    return torch.tensor(toks), torch.stack(rows, 0)


def hub_config(spec: dict, vocab: int, ids_map: dict) -> dict:
    """config.json in the published hub layout (XiaomiMiMo/MiMo-V2-Flash / MiMo-V2.5 keys)."""
    fused = spec["layout"] == "fused"
    cfg = {
        "architectures": ["MiMoV2ForCausalLM" if fused else "MiMoV2FlashForCausalLM"],
        "model_type": "mimo_v2" if fused else "mimo_v2_flash",
        "add_full_attention_sink_bias": False,
        "add_swa_attention_sink_bias": True,
        "attention_bias": False,
        "attention_chunk_size": spec["window"],
        "attention_dropout": 0.0,
        "attention_value_scale": spec["vscale"],
        "head_dim": spec["head_dim"],
        "hidden_act": "silu",
        "hidden_size": spec["hidden"],
        "hybrid_layer_pattern": spec["pattern"],
        "initializer_range": 0.02,
        "intermediate_size": spec["inter"],
        "layernorm_epsilon": spec["eps"],
        "max_position_embeddings": 512,
        "moe_intermediate_size": spec["moe_inter"],
        "moe_layer_freq": spec["moe_freq"],
        "n_group": spec["n_group"],
        "n_routed_experts": spec["experts"],
        "n_shared_experts": None,
        "norm_topk_prob": True,
        "num_attention_heads": spec["heads"],
        "num_experts_per_tok": spec["topk"],
        "num_hidden_layers": spec["layers"],
        "num_key_value_heads": spec["kv"],
        "num_nextn_predict_layers": 1,
        "partial_rotary_factor": spec["prf"],
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [BLOCK, BLOCK]},
        "rope_theta": spec["theta"],
        "routed_scaling_factor": spec["scaling"],
        "scoring_func": "sigmoid",
        "sliding_window": spec["window"],
        "sliding_window_size": spec["window"],
        "swa_head_dim": spec["head_dim"],
        "swa_num_attention_heads": spec["heads"],
        "swa_num_key_value_heads": spec["swa_kv"],
        "swa_rope_theta": spec["swa_theta"],
        "swa_v_head_dim": spec["v_head_dim"],
        "tie_word_embeddings": False,
        "topk_group": spec["topk_group"],
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.40.1",
        "use_cache": True,
        "v_head_dim": spec["v_head_dim"],
        "vocab_size": vocab,
        "bos_token_id": ids_map["<|endoftext|>"],
        "eos_token_id": ids_map["<|im_end|>"],
    }
    if fused:
        cfg["attention_projection_layout"] = "fused_qkv"
        cfg["vision_config"] = {"depth": 1, "hidden_size": 16}
        cfg["audio_config"] = {"group_size": 4}
    return dict(sorted(cfg.items()))


def extra_ignored_tensors(spec: dict, seed: int) -> dict[str, torch.Tensor]:
    """MTP block (and V2.5 vision/audio) tensors a text engine must ignore."""
    g = torch.Generator().manual_seed(seed + 99)
    H = spec["hidden"]
    t = {
        "model.mtp.layers.0.enorm.weight": torch.ones(H, dtype=torch.bfloat16),
        "model.mtp.layers.0.hnorm.weight": torch.ones(H, dtype=torch.bfloat16),
        "model.mtp.layers.0.eh_proj.weight": torch.randn(H, 2 * H, generator=g).to(torch.bfloat16),
    }
    if spec["layout"] == "fused":
        t["visual.patch_embed.proj.weight"] = torch.randn(16, 3, 2, 2, generator=g).to(torch.bfloat16)
        t["audio_encoder.input_proj.weight"] = torch.randn(16, 8, generator=g).to(torch.bfloat16)
        t["speech_embeddings.0.weight"] = torch.randn(8, H, generator=g).to(torch.bfloat16)
    return t


def write_checkpoint(folder: Path, tensors: dict[str, torch.Tensor], spec: dict) -> None:
    """Two shards + model.safetensors.index.json (layers < L/2 and globals in shard 1)."""
    half = spec["layers"] // 2

    def shard_of(name: str) -> int:
        if name.startswith("model.layers."):
            return 1 if int(name.split(".")[2]) < half else 2
        return 2 if name.startswith(("model.mtp.", "visual.", "audio_", "speech_")) else 1

    names = {1: "model-00001-of-00002.safetensors", 2: "model-00002-of-00002.safetensors"}
    parts = {1: {}, 2: {}}
    for k, v in tensors.items():
        parts[shard_of(k)][k] = v
    for i in (1, 2):
        fc.save_safetensors(parts[i], folder / names[i])
    wm = {k: names[shard_of(k)] for k in tensors}
    total = sum(v.numel() * v.element_size() for v in tensors.values())
    meta = {"total_size": total}
    if spec["layout"] == "fused":
        meta["tp_size"] = spec["kv"]
    fc.write_json(folder / "model.safetensors.index.json", {"metadata": meta, "weight_map": dict(sorted(wm.items()))})


def make_target(tok, name: str, spec: dict):
    vocab = tok.get_vocab_size()
    ids_map = fc.token_ids(tok)
    folder = fc.fresh_dir(fc.FIXTURES / "mimo" / name)
    prompt_ids = torch.tensor([tok.encode(spec["prompt"]).ids])
    n = prompt_ids.shape[1]
    seed = spec["seed"]
    for _ in range(50):
        model = build_hf(spec, vocab, seed)
        ck = quantize_into(model, spec)
        g_ids, g_logits = greedy_cached(model, prompt_ids, GREEDY_STEPS)
        gaps = fc.top2_gap(g_logits)
        logits, embed, layer_out, routes = forward_capture(model, prompt_ids)
        pgaps = fc.top2_gap(logits)
        if float(gaps.min()) > MIN_GAP and len(set(g_ids.tolist())) >= 6:
            break
        print(f"  {name}: seed {seed} rejected (min gap {float(gaps.min()):.2e})")
        seed += 1
    else:
        raise RuntimeError(name)
    full = torch.cat([prompt_ids, g_ids[None, :-1]], 1)
    lf, _, _, _ = forward_capture(model, full)
    assert torch.equal(torch.argmax(lf[n - 1:], -1), g_ids), "cached vs uncached greedy mismatch"
    cache_diff = float((lf[n - 1:] - g_logits).abs().max())
    assert cache_diff < 1e-4, cache_diff
    assert n + GREEDY_STEPS > 3 * spec["window"]

    # The SGLang window edge (W+1 keys): HF with sliding_window = W+1 over the prompt + continuation.
    from transformers import MiMoV2FlashForCausalLM
    alt = MiMoV2FlashForCausalLM(hf_config(spec, vocab, window=spec["window"] + 1)).to(torch.float32).eval()
    alt.load_state_dict(model.state_dict())
    alt.config._attn_implementation = "eager"
    with torch.no_grad():
        lw1 = alt(input_ids=full, use_cache=False).logits[0]
    window_sensitivity = float((lw1 - lf).abs().max())
    assert window_sensitivity > 1e-2, window_sensitivity

    ck.update(extra_ignored_tensors(spec, seed))
    fc.write_json(folder / "config.json", hub_config(spec, vocab, ids_map))
    write_checkpoint(folder, ck, spec)
    fc.write_tokenizer_files(tok, folder)
    golden = {
        "prompt_ids": fc.i32(prompt_ids[0]),
        "embed": fc.f32(embed),
        "layer_out": fc.f32(layer_out),
        "router_topk": routes,
        "greedy_ids": fc.i32(g_ids),
        # One no-cache forward over prompt + greedy_ids[:-1]: row p predicts position p+1; rows
        # 0..n-2 are the prompt logits, row n-1+i chose greedy_ids[i] (equal to the cached
        # incremental logits within cached_vs_uncached_max_abs_diff).
        "full_ids": fc.i32(full[0]),
        "full_logits": fc.f32(lf),
    }
    if spec["layout"] == "split":
        # Same sequence with the SGLang edge (W+1 keys), rows n-1.. only (where the window cuts).
        golden["window_plus1_logits_from_n_minus_1"] = fc.f32(lw1[n - 1:])
    fc.save_safetensors(golden, folder / "golden.safetensors")
    meta = {
        "reference": f"transformers {__import__('transformers').__version__} MiMoV2FlashForCausalLM "
                     f"(in-library), eager, float32, CPU, weights = FP8 x weight_scale_inv",
        "layout": spec["layout"],
        "seed": seed,
        "prompt_text": spec["prompt"],
        "n_prompt": n,
        "greedy_steps": GREEDY_STEPS,
        "greedy_min_top2_gap": round(float(gaps.min()), 6),
        "prompt_min_top2_gap": round(float(pgaps.min()), 6),
        "cached_vs_uncached_max_abs_diff": cache_diff,
        "window_plus1_max_abs_logit_change": round(window_sensitivity, 4),
        "ckpt_tp": spec["kv"],
        "tensors": {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in golden.items()},
    }
    fc.write_json(folder / "golden.json", meta)
    print(f"mimo/{name}: seed {seed}, n={n}, min gap {float(gaps.min()):.3e}, "
          f"W+1 change {window_sensitivity:.3f}, greedy {g_ids.tolist()[:10]}..., "
          f"{fc.dir_size(folder)/1024:.0f} KiB")
    return model, prompt_ids[0], g_ids


@torch.no_grad()
def mimo_taps(model, ids: torch.Tensor, layer_ids: list[int]):
    """Residual stream after each tapped layer (pre-final-norm, also for the last layer): [T, K*H]."""
    outs = {}
    hooks = []
    for lid in layer_ids:
        hooks.append(model.model.layers[lid].register_forward_hook(
            lambda m, a, o, lid=lid: outs.__setitem__(lid, o[0] if isinstance(o, tuple) else o)))
    try:
        logits = model(input_ids=ids[None].long(), use_cache=False).logits[0]
    finally:
        for h in hooks:
            h.remove()
    return torch.cat([outs[lid][0] for lid in layer_ids], -1), logits


def make_drafter(tok, target, prompt: torch.Tensor, greedy: torch.Tensor) -> None:
    spec = DRAFT
    mask_id = fc.token_ids(tok)["<|MASK|>"]
    folder = fc.fresh_dir(fc.FIXTURES / "mimo" / "dflash")
    ddir = folder / "draft"
    n = prompt.numel()
    taps, tlogits = mimo_taps(target, prompt, spec["taps"])
    anchor = int(torch.argmax(tlogits[-1]))
    assert anchor == int(greedy[0])
    E = target.model.embed_tokens.weight.detach()
    lm_w = target.lm_head.weight.detach()
    cfg = mdf.draft_config(spec, len(target.model.layers), mask_id, dtype="float16")
    shapes = mdf.draft_param_shapes(cfg, len(spec["taps"]), target.config.hidden_size)
    seed = spec["seed"]
    for _ in range(50):
        weights = mdf.random_draft_weights(shapes, seed)
        g = torch.Generator().manual_seed(seed + 100000)
        mask_emb = (0.15 * torch.randn(cfg["hidden_size"], generator=g, dtype=torch.float64)).float()
        fc.fresh_dir(ddir)
        # F16 storage (fp32 math in the engine, half the bytes of the fixture); the reference reads the
        # same F16 values back.
        weights = {k: v.to(torch.float16).to(torch.float32) for k, v in weights.items()}
        mdf.write_draft(ddir, cfg, weights, "mimo", None, mask_id, dtype=torch.float16)
        torch.save({"embedding": mask_emb.clone(), "mask_token_id": int(mask_id)}, str(ddir / "mask_embedding.pt"))
        rcfg, rw, rmask = dflash_ref.load_draft(ddir)
        ref = dflash_ref.DFlashRef(rcfg, rw, rmask)
        ids1 = torch.tensor([anchor] + [mask_id] * (spec["block"] - 1))
        h1 = ref.forward(taps, 0, ref.embed_block(ids1, E), n)
        l1 = h1[1:] @ lm_w.T
        gap = float(fc.top2_gap(l1).min())
        if gap > MIN_GAP:
            break
        seed += 1
    else:
        raise RuntimeError("drafter")
    # Tap check: hidden_states of HF (output_hidden_states) equal the hooks except the last layer,
    # where HF's hidden_states[-1] is post-final-norm (vLLM / our aux = pre-norm).
    with torch.no_grad():
        hs = target(input_ids=prompt[None].long(), output_hidden_states=True, use_cache=False).hidden_states
    H = target.config.hidden_size
    last = spec["taps"][-1]
    pre_vs_post = float((hs[last + 1][0] - taps[:, -H:]).abs().max())
    golden = {
        "prompt_ids": fc.i32(prompt),
        "target_layer_ids": fc.i32(spec["taps"]),
        "taps": fc.f32(taps),
        "embed_aux0": fc.f32(hs[0][0]),
        "anchor": fc.i32([anchor]),
        "block_ids": fc.i32(ids1),
        "block_hidden": fc.f32(h1),
        "block_logits": fc.f32(l1),
        "draft_ids": fc.i32(torch.argmax(l1, -1)),
    }
    fc.save_safetensors(golden, folder / "golden.safetensors")
    meta = {
        "target": f"tests/fixtures/mimo/{spec['target']}",
        "draft": "draft",
        "golden_reference": "taps: transformers MiMoV2FlashForCausalLM forward hooks (pre-final-norm); "
                            "block: tools/ref/dflash_ref.py",
        "seed": seed,
        "draft_min_top2_gap": round(gap, 6),
        "n_prompt": n,
        "block_size": spec["block"],
        "taps": spec["taps"],
        "hf_hidden_states_last_is_post_norm_max_abs_diff_vs_pre_norm_tap": round(pre_vs_post, 4),
        "tensors": {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in golden.items()},
    }
    fc.write_json(folder / "meta.json", meta)
    print(f"mimo/dflash: seed {seed}, gap {gap:.3e}, drafts {golden['draft_ids'].tolist()}, "
          f"HF post-norm vs pre-norm last tap {pre_vs_post:.3f}, {fc.dir_size(folder)/1024:.0f} KiB")


def main() -> None:
    fc.setup_determinism()
    tok = fc.build_tokenizer()
    only = set(sys.argv[1:])
    made = {}
    for name, spec in FIXTURES.items():
        if only and name not in only and not (name == DRAFT["target"] and "dflash" in only):
            continue
        made[name] = make_target(tok, name, spec)
    if not only or "dflash" in only:
        make_drafter(tok, *made[DRAFT["target"]])


if __name__ == "__main__":
    main()
