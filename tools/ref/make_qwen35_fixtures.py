#!/usr/bin/env python3
"""Tiny random Qwen3.5 hybrid checkpoints (Gated DeltaNet + gated attention) + goldens from
transformers 5.x `Qwen3_5ForCausalLM` (the reference).

Writes tests/fixtures/qwen35/<name>/: config.json, model.safetensors, tokenizer files,
generation_config.json, golden.safetensors, golden.json.

Fixtures:
  flat_untied   Qwen3_5ForCausalLM as save_pretrained writes it (flat config, rope_parameters,
                `model.` prefix), 4 layers = 3 linear_attention + 1 full_attention, untied head.
  nested_tied   the published Qwen3_5ForConditionalGeneration layout: config nested in
                `text_config`, `model.language_model.` prefix, top-level rope_theta /
                partial_rotary_factor inside text_config, tied embeddings, plus small `mtp.*`
                and `model.visual.*` tensors the loader must skip. Same HF model class computes
                the goldens (the weights are renamed, not changed).

Goldens (as tools/ref/make_qwen3_fixtures.py): prompt_ids, embed [n,H], layer_out [L,n,H],
logits [n,V] of a no-cache forward, greedy_ids [32] / greedy_logits [32,V] of a cached greedy
decode (HF: chunked GDN prefill, recurrent GDN decode).

Run from the repo root:  /work/venv-gguf/bin/python tools/ref/make_qwen35_fixtures.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import fixture_common as fc  # noqa: E402

GREEDY_STEPS = 32
MIN_GAP = 5e-3
PROMPT = "The quick brown fox jumps over the lazy dog."

FIXTURES = {
    "flat_untied": dict(layer_types=["linear_attention"] * 3 + ["full_attention"], tied=False,
                        seed=5001, style="flat"),
    "nested_tied": dict(layer_types=["linear_attention", "full_attention"] * 2 +
                        ["linear_attention"], tied=True, seed=6001, style="nested"),
    # Qwen3_5MoeForCausalLM text model: 8 experts top-4 (softmax, renormalised) + gated shared
    # expert. moe_fused: the fused expert tensors transformers 5 writes (experts.gate_up_proj
    # [E, 2I, H], experts.down_proj [E, H, I]); moe_per_expert: split into
    # experts.{e}.{gate,up,down}_proj (what save_pretrained writes) nested as
# Qwen3_5MoeForConditionalGeneration; moe_fused: those tensors stacked into the fused layout.
    "moe_fused": dict(layer_types=["linear_attention"] * 3 + ["full_attention"], tied=False,
                      seed=7001, style="flat", moe=True, fuse=True),
    "moe_per_expert": dict(layer_types=["linear_attention", "full_attention"] * 2, tied=False,
                           seed=8001, style="nested", moe=True),
}


def make_config(vocab: int, tok_ids: dict, layer_types, tied: bool, moe: bool = False):
    from transformers import Qwen3_5TextConfig, Qwen3_5MoeTextConfig
    extra = dict(intermediate_size=64)
    if moe:
        extra = dict(num_experts=8, num_experts_per_tok=4, moe_intermediate_size=16,
                     shared_expert_intermediate_size=16)
    cls = Qwen3_5MoeTextConfig if moe else Qwen3_5TextConfig
    cfg = cls(
        vocab_size=vocab, hidden_size=48, **extra,
        num_hidden_layers=len(layer_types), num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, hidden_act="silu", max_position_embeddings=512, rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25, "mrope_interleaved": True,
                         "mrope_section": [1, 1, 0]},
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, layer_types=list(layer_types),
        bos_token_id=tok_ids["<|endoftext|>"], eos_token_id=tok_ids["<|im_end|>"])
    cfg.architectures = ["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"]
    cfg._attn_implementation = "eager"
    cfg.dtype = "float32"
    return cfg


def build_model(cfg, seed: int):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM
    torch.manual_seed(seed)
    cls = Qwen3_5MoeForCausalLM if cfg.architectures[0].startswith("Qwen3_5Moe") else Qwen3_5ForCausalLM
    model = cls(cfg).to(torch.float32)
    model.config._attn_implementation = "eager"
    fc.random_init_(model, seed, std=0.15, norm_jitter=0.1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # zero-centred norms: stored as offsets from 1 (init 0); the gated GDN norm is plain.
            if name.endswith("layernorm.weight") or name.endswith("q_norm.weight") or \
               name.endswith("k_norm.weight") or name == "model.norm.weight":
                p.sub_(1.0)
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.linspace(0.5, 4.0, p.numel())))
    model.eval()
    return model


@torch.no_grad()
def forward_capture(model, ids):
    outs, emb = [], []
    hooks = [layer.register_forward_hook(lambda m, a, o: outs.append(o[0] if isinstance(o, tuple) else o))
             for layer in model.model.layers]
    hooks.append(model.model.embed_tokens.register_forward_hook(lambda m, a, o: emb.append(o)))
    try:
        out = model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return out.logits[0], emb[0][0], torch.stack([o[0] for o in outs], 0)


@torch.no_grad()
def greedy_cached(model, ids, steps: int):
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


def fuse_experts(folder: Path) -> None:
    """Per-expert tensors -> the fused layout: experts.gate_up_proj [E, 2I, H] (gate rows first),
    experts.down_proj [E, H, I] (the parameters of transformers' Qwen3_5MoeExperts)."""
    import re
    from safetensors.torch import load_file, save_file
    st = folder / "model.safetensors"
    w = load_file(str(st))
    out, groups = {}, {}
    for k, v in w.items():
        m = re.match(r"(.*mlp\.experts\.)(\d+)\.(gate|up|down)_proj\.weight$", k)
        if m:
            groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = v
        else:
            out[k] = v
    for base, g in groups.items():
        n = 1 + max(e for e, _ in g)
        out[base + "gate_up_proj"] = torch.stack(
            [torch.cat([g[(e, "gate")], g[(e, "up")]], 0) for e in range(n)], 0).contiguous()
        out[base + "down_proj"] = torch.stack([g[(e, "down")] for e in range(n)], 0).contiguous()
    save_file(out, str(st), metadata={"format": "pt"})


def nest(folder: Path, tok_vocab: int) -> None:
    """Rewrite a flat Qwen3_5ForCausalLM folder into the published ConditionalGeneration layout."""
    from safetensors.torch import load_file, save_file
    p = folder / "config.json"
    flat = json.loads(p.read_text())
    text = {k: v for k, v in flat.items() if k not in ("architectures", "transformers_version")}
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope["rope_theta"]           # transformers-4 style, inside text_config
    text["partial_rotary_factor"] = rope["partial_rotary_factor"]
    text["rope_scaling"] = {"rope_type": "default", "mrope_interleaved": True,
                            "mrope_section": rope["mrope_section"]}
    text["model_type"] = "qwen3_5_text"
    text["mtp_num_hidden_layers"] = 1
    text["mamba_ssm_dtype"] = "float32"
    text["attn_output_gate"] = True
    text["full_attention_interval"] = 2
    moe = "num_experts" in text
    if moe:
        text["model_type"] = "qwen3_5_moe_text"
    top = {"architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else
                             "Qwen3_5ForConditionalGeneration"],
           "model_type": "qwen3_5_moe" if moe else "qwen3_5",
           "text_config": text, "vision_config": {"depth": 1, "hidden_size": 8},
           "image_token_id": tok_vocab + 7, "tie_word_embeddings": flat["tie_word_embeddings"],
           "transformers_version": flat.get("transformers_version", "")}
    fc.write_json(p, top)
    st = folder / "model.safetensors"
    w = load_file(str(st))
    out = {}
    for k, v in w.items():
        out[k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k] = v
    g = torch.Generator().manual_seed(7)
    out["mtp.fc.weight"] = torch.randn(8, 8, generator=g)
    out["mtp.layers.0.input_layernorm.weight"] = torch.randn(8, generator=g)
    out["model.visual.patch_embed.proj.weight"] = torch.randn(8, 4, generator=g)
    save_file(out, str(st), metadata={"format": "pt"})


def make_fixture(tok, name: str, spec: dict) -> None:
    vocab = tok.get_vocab_size()
    ids_map = fc.token_ids(tok)
    folder = fc.fresh_dir(fc.FIXTURES / "qwen35" / name)
    prompt_ids = torch.tensor([tok.encode(PROMPT).ids])
    n = prompt_ids.shape[1]
    seed = spec["seed"]
    for _ in range(50):
        cfg = make_config(vocab, ids_map, spec["layer_types"], spec["tied"], spec.get("moe", False))
        model = build_model(cfg, seed)
        g_ids, g_logits = greedy_cached(model, prompt_ids, GREEDY_STEPS)
        gaps = fc.top2_gap(g_logits)
        if float(gaps.min()) > MIN_GAP and len(set(g_ids.tolist())) >= 4:
            break
        seed += 1
    else:
        raise RuntimeError(name)
    logits, embed, layer_out = forward_capture(model, prompt_ids)
    full = torch.cat([prompt_ids, g_ids[None, :-1]], 1)
    lf, _, _ = forward_capture(model, full)
    assert torch.equal(torch.argmax(lf[n - 1:], -1), g_ids), "cached vs uncached greedy mismatch"
    assert float((lf[n - 1:] - g_logits).abs().max()) < 1e-4
    model.save_pretrained(str(folder))
    if spec.get("fuse"):
        fuse_experts(folder)
        # transformers loads the fused layout back to the same model (checks the layout).
        re = type(model).from_pretrained(str(folder), dtype=torch.float32,
                                         attn_implementation="eager").eval()
        with torch.no_grad():
            d = float((re(input_ids=prompt_ids, use_cache=False).logits[0] - logits).abs().max())
        assert d == 0.0, f"fused reload differs by {d}"
    if spec["style"] == "nested":
        nest(folder, vocab)
    fc.write_tokenizer_files(tok, folder)
    golden = {"prompt_ids": fc.i32(prompt_ids[0]), "logits": fc.f32(logits), "embed": fc.f32(embed),
              "layer_out": fc.f32(layer_out), "greedy_ids": fc.i32(g_ids),
              "greedy_logits": fc.f32(g_logits)}
    fc.save_safetensors(golden, folder / "golden.safetensors")
    fc.write_json(folder / "golden.json", {
        "reference": f"transformers {__import__('transformers').__version__} "
                     f"{type(model).__name__}, "
                     "eager, float32, CPU (chunked GDN prefill, recurrent GDN decode)",
        "seed": seed, "prompt_text": PROMPT, "n_prompt": n, "greedy_steps": GREEDY_STEPS,
        "greedy_min_top2_gap": round(float(gaps.min()), 6), "style": spec["style"],
        "layer_types": spec["layer_types"]})
    print(f"qwen35/{name}: seed {seed}, n={n}, gap {float(gaps.min()):.3e}, "
          f"greedy {g_ids.tolist()[:10]}..., {fc.dir_size(folder)/1024:.0f} KiB")


def make_drafter(tok) -> None:
    """A random z-lab-layout DFlash drafter for flat_untied (no goldens: it feeds the engine
    identity / lossless tests, whose oracle is target-only decoding). Taps [1, 3]: the output of
    a linear_attention layer and of the full_attention layer."""
    import make_dflash_fixtures as mdf
    folder = fc.fresh_dir(fc.FIXTURES / "qwen35" / "flat_untied_draft")
    spec = dict(layers=2, taps=[1, 3], block=8,
                cfg={"layer_types": ["full_attention"] * 2, "sliding_window": None,
                     "use_sliding_window": False, "hidden_size": 48, "intermediate_size": 64})
    cfg = mdf.draft_config(spec, n_target_layers=4, mask_id=tok.get_vocab_size() - 1)
    w = mdf.random_draft_weights(mdf.draft_param_shapes(cfg, 2, 48), seed=5101)
    mdf.write_draft(folder, cfg, w, "zlab")
    print(f"qwen35/flat_untied_draft: {fc.dir_size(folder)/1024:.0f} KiB")


def main() -> None:
    fc.setup_determinism()
    tok = fc.build_tokenizer()
    only = set(sys.argv[1:])
    for name, spec in FIXTURES.items():
        if not only or name in only:
            make_fixture(tok, name, spec)
    if not only or "draft" in only:
        make_drafter(tok)


if __name__ == "__main__":
    main()
