#!/usr/bin/env python3
"""Tiny random Gemma 4 text checkpoints + golden data from Hugging Face transformers (the oracle).

Writes tests/fixtures/gemma4/<name>/: config.json, model.safetensors, tokenizer files,
golden.safetensors (prompt_ids, logits [n,V], embed [n,H] (scaled by sqrt(H)), layer_out [L,n,H]
(each decoder layer's output, after layer_scalar), greedy_ids [32], greedy_logits [32,V]) and
golden.json.

  dense_v5   Gemma4ForCausalLM, 12 layers (full attention at 5 and 11, sliding W=8 elsewhere),
             attention_k_eq_v (global layers: no v_proj), global head_dim 32 with 1 KV head vs
             16 / 2 on sliding layers, proportional RoPE (partial 0.25) on global layers, final
             soft-cap 30; the config exactly as transformers 5.24 saves it (per_layer_config)
  moe_hub    Gemma4ForConditionalGeneration (text only, weights under model.language_model.),
             6 layers, enable_moe_block (4 experts, top 2, GeGLU experts beside the dense MLP),
             the config rewritten in the hub layout of google/gemma-4-26B-A4B (text_config with
             global_head_dim / num_global_key_value_heads instead of per_layer_config)

Norm weights ~ 1 + jitter (Gemma 4 applies them as stored), layer_scalar (in [0.4, 1)), router.scale and
router.per_expert_scale drawn away from 1 so each is exercised.

Run from the repo root with transformers 5.24:  python3 tools/ref/make_gemma4_fixtures.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import fixture_common as fc  # noqa: E402
from make_qwen3_fixtures import GREEDY_STEPS, MIN_GAP, PROMPT_LONG  # noqa: E402

FIXTURES = {
    "dense_v5": dict(layers=12, seed=6101, moe=False, multimodal=False, hub=False),
    "moe_hub": dict(layers=6, seed=6201, moe=True, multimodal=True, hub=True),
}


def text_config(vocab, ids, spec):
    from transformers import Gemma4TextConfig
    moe = dict(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32) \
        if spec["moe"] else {}
    geo = dict(hidden_size=64, intermediate_size=96, head_dim=16, global_head_dim=32)
    geo.update(spec.get("geometry", {}))
    return Gemma4TextConfig(
        vocab_size=vocab, num_hidden_layers=spec["layers"], **geo,
        num_attention_heads=4, num_key_value_heads=2,
        num_global_key_value_heads=1, attention_k_eq_v=True, max_position_embeddings=512,
        rms_norm_eps=1e-6, sliding_window=8, hidden_size_per_layer_input=0,
        final_logit_softcapping=30.0, tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"] if spec["multimodal"] else None, **moe)


def build_model(vocab, ids, spec, seed):
    from transformers import Gemma4Config, Gemma4ForCausalLM, Gemma4ForConditionalGeneration
    tc = text_config(vocab, ids, spec)
    torch.manual_seed(seed)
    if spec["multimodal"]:
        cfg = Gemma4Config(text_config=tc.to_dict(), vision_config=None, audio_config=None)
        cfg.architectures = ["Gemma4ForConditionalGeneration"]
        cfg._attn_implementation = "eager"
        cfg.text_config._attn_implementation = "eager"
        model = Gemma4ForConditionalGeneration(cfg).to(torch.float32)
    else:
        tc.architectures = ["Gemma4ForCausalLM"]
        tc._attn_implementation = "eager"
        model = Gemma4ForCausalLM(tc).to(torch.float32)
    model.config._attn_implementation = "eager"
    for c in (model.config, getattr(model.config, "text_config", None)):
        if c is not None:
            c._experts_implementation = "eager"  # modeling_gemma4's own expert loop
    fc.random_init_(model, seed, std=spec.get("std", 0.15), norm_jitter=0.1)
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # q/k norms ~ 0.5: logits (scale 1.0) of std ~ sqrt(head_dim)/4, not a chaotic fixture
            if name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
                p.mul_(0.5)
            if name.endswith("router.scale") or name.endswith("per_expert_scale"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.4 + 0.6 * torch.rand(b.shape, generator=g, dtype=torch.float64))
    model.eval()
    return model


def text_model(model):
    m = model.model
    return m.language_model if hasattr(m, "language_model") else m


@torch.no_grad()
def forward_capture(model, ids):
    """One forward over ids [1,n] (no cache): logits [n,V], embed [n,H], layer_out [L,n,H]."""
    tm = text_model(model)
    outs, emb = [], []
    hooks = [layer.register_forward_hook(lambda m, a, o: outs.append(o[0] if isinstance(o, tuple) else o))
             for layer in tm.layers]
    hooks.append(tm.embed_tokens.register_forward_hook(lambda m, a, o: emb.append(o)))
    try:
        out = model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return out.logits[0], emb[0][0], torch.stack([o[0] for o in outs], 0)


@torch.no_grad()
def greedy_cached(model, ids, steps):
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


def hub_config(folder: Path) -> None:
    """The layout of google/gemma-4-26B-A4B's config.json: global_head_dim and
    num_global_key_value_heads in text_config instead of transformers 5.24's per_layer_config."""
    p = folder / "config.json"
    cfg = json.loads(p.read_text())
    tc = cfg["text_config"]
    plc = tc.pop("per_layer_config")
    first = plc[sorted(plc, key=int)[0]]
    assert all(v == first for v in plc.values())
    tc["global_head_dim"] = first["head_dim"]
    tc["num_global_key_value_heads"] = first["num_key_value_heads"]
    fc.write_json(p, cfg)


def fp32_noise(model, ids) -> float:
    """max |layer_out fp32 - layer_out fp64| of HF itself: how well conditioned the fixture is."""
    import copy
    _, _, lo32 = forward_capture(model, ids)
    _, _, lo64 = forward_capture(copy.deepcopy(model).double(), ids)
    return float((lo32.double() - lo64).abs().max())


def make_fixture(tok, name, spec):
    vocab = tok.get_vocab_size()
    folder = fc.fresh_dir(fc.FIXTURES / "gemma4" / name)
    prompt_ids = torch.tensor([tok.encode(PROMPT_LONG).ids])
    n = prompt_ids.shape[1]
    seed = spec["seed"]
    for _ in range(50):
        model = build_model(vocab, fc.token_ids(tok), spec, seed)
        g_ids, g_logits = greedy_cached(model, prompt_ids, GREEDY_STEPS)
        gaps = fc.top2_gap(g_logits)
        noise = fp32_noise(model, prompt_ids)
        if float(gaps.min()) > MIN_GAP and len(set(g_ids.tolist())) >= 4 and noise < 3e-5:
            break
        seed += 1
    else:
        raise RuntimeError(f"{name}: no seed with margins")
    logits, embed, layer_out = forward_capture(model, prompt_ids)
    full = torch.cat([prompt_ids, g_ids[None, :-1]], 1)
    lf, _, _ = forward_capture(model, full)
    assert torch.equal(torch.argmax(lf[n - 1:], -1), g_ids), "cached vs uncached greedy mismatch"
    model.save_pretrained(str(folder))
    if spec["hub"]:
        hub_config(folder)
    fc.write_tokenizer_files(tok, folder)
    cls = type(model)
    m2 = cls.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager")
    d = float((m2(input_ids=prompt_ids, use_cache=False).logits[0] - logits).abs().max())
    assert d == 0.0, f"reloaded checkpoint differs by {d}"
    golden = {"prompt_ids": fc.i32(prompt_ids[0]), "logits": fc.f32(logits), "embed": fc.f32(embed),
              "layer_out": fc.f32(layer_out), "greedy_ids": fc.i32(g_ids),
              "greedy_logits": fc.f32(g_logits)}
    fc.save_safetensors(golden, folder / "golden.safetensors")
    fc.write_json(folder / "golden.json", {
        "reference": f"transformers {__import__('transformers').__version__} {cls.__name__}, "
                     "attn_implementation=eager, float32, CPU",
        "seed": seed, "prompt_text": PROMPT_LONG, "n_prompt": n, "greedy_steps": GREEDY_STEPS,
        "greedy_min_top2_gap": round(float(gaps.min()), 6), "hf_fp32_vs_fp64_layer_out": noise,
        "hub_config": spec["hub"]})
    print(f"gemma4/{name}: seed {seed}, n={n}, min gap {float(gaps.min()):.3e}, HF fp32 noise {noise:.1e}, "
          f"{fc.dir_size(folder) / 1024:.0f} KiB")


def main():
    fc.setup_determinism()
    tok = fc.build_tokenizer()
    for name, spec in FIXTURES.items():
        if len(sys.argv) > 1 and name not in sys.argv[1:]:
            continue
        make_fixture(tok, name, spec)


if __name__ == "__main__":
    main()
