#!/usr/bin/env python3
"""Tiny random Qwen3 checkpoints + golden data from Hugging Face transformers (the reference).

Writes:
  tests/fixtures/qwen3/<name>/   config.json, model.safetensors (or sharded + index), tokenizer files,
                                 generation_config.json, golden.safetensors, golden.json
  tests/fixtures/default/target/ the embedded bf16 default model for `make run` (no goldens)

Run from the repo root:  python3 tools/ref/make_qwen3_fixtures.py
Deterministic: re-running produces byte-identical files (CPU, one thread, fixed seeds).
See docs/FIXTURES.md for the semantics of every golden tensor.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import fixture_common as fc  # noqa: E402

GREEDY_STEPS = 32
MIN_GAP = 5e-3  # top1 - top2 logit gap required at every greedy step (fp32 C++ must pick the same token)

PROMPT_SHORT = "The quick brown fox jumps over the lazy dog."  # 22 tokens
# 43 tokens; with the 32 greedy tokens the sequence reaches position 74 > yarn's original 64.
PROMPT_LONG = ("Block diffusion drafters fill a whole block of masked positions in parallel, "
               "conditioned on hidden states.")

# name -> spec. All: hidden 64, head_dim 16, intermediate 128, max_pos 512, eps 1e-6, theta 1e4, fp32.
# config_style "legacy": config.json rewritten to the transformers-4.x form found in real Qwen3 hub
# checkpoints (top-level rope_theta / rope_scaling, torch_dtype); "v5": exactly what
# transformers 5.x save_pretrained writes (rope_parameters dict, dtype). Loaders must accept both.
QWEN3_FIXTURES = {
    "tied_gqa2": dict(layers=2, heads=4, kv=2, tied=True, prompt=PROMPT_SHORT, seed=1001,
                      config_style="legacy"),
    "untied_gqa1": dict(layers=2, heads=4, kv=4, tied=False, prompt=PROMPT_SHORT, seed=2001,
                        config_style="v5"),
    "gqa4_yarn": dict(layers=2, heads=8, kv=2, tied=True, prompt=PROMPT_LONG, seed=3001,
                      config_style="legacy",
                      rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 64}),
    "sharded": dict(layers=3, heads=4, kv=1, tied=False, prompt=PROMPT_SHORT, seed=4001,
                    config_style="v5", shard="400KB"),
}


def make_config(vocab: int, tok_ids: dict, *, hidden=64, layers=2, heads=4, kv=2, head_dim=16,
                inter=128, tied=True, rope_scaling=None, max_pos=512, dtype="float32"):
    from transformers import Qwen3Config
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if rope_scaling:
        rope = dict(rope_scaling, rope_theta=10000.0)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        hidden_act="silu",
        max_position_embeddings=max_pos,
        rms_norm_eps=1e-6,
        rope_parameters=rope,
        tie_word_embeddings=tied,
        attention_bias=False,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=layers,
        bos_token_id=tok_ids["<|endoftext|>"],
        eos_token_id=tok_ids["<|im_end|>"],
        pad_token_id=None,
    )
    cfg.architectures = ["Qwen3ForCausalLM"]
    cfg._attn_implementation = "eager"
    cfg.dtype = dtype
    return cfg


def build_model(cfg, seed: int):
    from transformers import Qwen3ForCausalLM
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(torch.float32)
    model.config._attn_implementation = "eager"
    fc.random_init_(model, seed, std=0.15, norm_jitter=0.1)
    model.eval()
    return model


@torch.no_grad()
def forward_capture(model, ids: torch.Tensor):
    """One forward over ids [1,n] (no cache). Returns logits [n,V], embed [n,H], layer_out [L,n,H]."""
    outs = []
    hooks = [layer.register_forward_hook(lambda m, a, o: outs.append(o[0] if isinstance(o, tuple) else o))
             for layer in model.model.layers]
    emb = []
    hooks.append(model.model.embed_tokens.register_forward_hook(lambda m, a, o: emb.append(o)))
    try:
        out = model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    layer_out = torch.stack([o[0] for o in outs], 0)
    return out.logits[0], emb[0][0], layer_out


@torch.no_grad()
def greedy_cached(model, ids: torch.Tensor, steps: int):
    """Greedy continuation with the KV cache (use_cache=True), eos ignored.

    Returns (tokens [steps], logits [steps, V]) where logits[i] chose tokens[i].
    """
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


def save_model(model, folder: Path, shard: str | None, dtype=torch.float32):
    model = model.to(dtype)
    kwargs = {}
    if shard:
        kwargs["max_shard_size"] = shard
    model.save_pretrained(str(folder), **kwargs)
    model.to(torch.float32)


def legacy_config(folder: Path) -> None:
    """Rewrite a transformers-5 config.json into the transformers-4.x layout of real Qwen3 repos."""
    import json
    p = folder / "config.json"
    cfg = json.loads(p.read_text())
    rope = cfg.pop("rope_parameters")
    out = {}
    for k, v in cfg.items():
        if k == "dtype":
            k = "torch_dtype"
        out[k] = v
        if k == "rms_norm_eps":
            scaling = {kk: vv for kk, vv in rope.items() if kk != "rope_theta"}
            out["rope_scaling"] = None if scaling.get("rope_type") == "default" else scaling
            out["rope_theta"] = rope["rope_theta"]
    out["transformers_version"] = "4.51.0"
    out.pop("layer_types", None)  # absent in real Qwen3 configs
    fc.write_json(p, dict(sorted(out.items())))


@torch.no_grad()
def check_reload(folder: Path, prompt_ids: torch.Tensor, logits: torch.Tensor) -> float:
    from transformers import Qwen3ForCausalLM
    m = Qwen3ForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager")
    m.eval()
    diff = float((m(input_ids=prompt_ids, use_cache=False).logits[0] - logits).abs().max())
    assert diff == 0.0, f"{folder}: reloaded checkpoint differs by {diff}"
    return diff


def make_qwen3_fixture(tok, name: str, spec: dict) -> dict:
    vocab = tok.get_vocab_size()
    ids_map = fc.token_ids(tok)
    folder = fc.fresh_dir(fc.FIXTURES / "qwen3" / name)
    prompt_ids = torch.tensor([tok.encode(spec["prompt"]).ids])
    n = prompt_ids.shape[1]
    seed = spec["seed"]
    for attempt in range(50):
        cfg = make_config(vocab, ids_map, layers=spec["layers"], heads=spec["heads"], kv=spec["kv"],
                          tied=spec["tied"], rope_scaling=spec.get("rope_scaling"))
        model = build_model(cfg, seed)
        g_ids, g_logits = greedy_cached(model, prompt_ids, GREEDY_STEPS)
        gaps = fc.top2_gap(g_logits)
        distinct = len(set(g_ids.tolist()))
        if float(gaps.min()) > MIN_GAP and distinct >= 4:
            break
        print(f"  {name}: seed {seed} rejected (min gap {float(gaps.min()):.2e}, distinct {distinct})")
        seed += 1
    else:
        raise RuntimeError(f"{name}: no seed with margins")

    logits, embed, layer_out = forward_capture(model, prompt_ids)
    # Consistency: the cached greedy loop equals a no-cache recomputation over the full sequence.
    full = torch.cat([prompt_ids, g_ids[None, :-1]], 1)
    lf, _, _ = forward_capture(model, full)
    assert torch.equal(torch.argmax(lf[n - 1:], -1), g_ids), "cached vs uncached greedy mismatch"
    max_cache_diff = float((lf[n - 1:] - g_logits).abs().max())
    assert max_cache_diff < 1e-4, max_cache_diff
    # Final-norm check: layer_out[-1] -> norm -> lm_head reproduces logits.
    with torch.no_grad():
        re = model.lm_head(model.model.norm(layer_out[-1]))
    assert float((re - logits).abs().max()) < 1e-5

    save_model(model, folder, spec.get("shard"))
    if spec["config_style"] == "legacy":
        legacy_config(folder)
    fc.write_tokenizer_files(tok, folder)
    check_reload(folder, prompt_ids, logits)
    golden = {
        "prompt_ids": fc.i32(prompt_ids[0]),
        "logits": fc.f32(logits),
        "embed": fc.f32(embed),
        "layer_out": fc.f32(layer_out),
        "greedy_ids": fc.i32(g_ids),
        "greedy_logits": fc.f32(g_logits),
    }
    fc.save_safetensors(golden, folder / "golden.safetensors")
    meta = {
        "reference": f"transformers {__import__('transformers').__version__} Qwen3ForCausalLM, "
                     f"attn_implementation=eager, float32, CPU",
        "seed": seed,
        "prompt_text": spec["prompt"],
        "n_prompt": n,
        "greedy_steps": GREEDY_STEPS,
        "greedy_min_top2_gap": round(float(gaps.min()), 6),
        "prompt_plus_greedy_len": n + GREEDY_STEPS,
        "config_style": spec["config_style"],
        "tensors": {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in golden.items()},
    }
    fc.write_json(folder / "golden.json", meta)
    print(f"qwen3/{name}: seed {seed}, n={n}, min gap {float(gaps.min()):.3e}, "
          f"greedy {g_ids.tolist()[:12]}..., {fc.dir_size(folder)/1024:.0f} KiB")
    return meta


def make_default_target(tok) -> None:
    folder = fc.fresh_dir(fc.FIXTURES / "default" / "target")
    cfg = make_config(tok.get_vocab_size(), fc.token_ids(tok), hidden=128, layers=4, heads=4, kv=2,
                      head_dim=32, inter=256, tied=True, max_pos=2048, dtype="bfloat16")
    model = build_model(cfg, 9001)
    # Round to bf16 (the stored dtype) so the saved weights are exactly what is loaded.
    model = model.to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    model.save_pretrained(str(folder))
    fc.write_tokenizer_files(tok, folder)
    (fc.FIXTURES / "default" / "README.txt").write_text(
        "Embedded default models for `make run`.\n\n"
        "target/ : tiny Qwen3ForCausalLM (hidden 128, 4 layers, 4 heads / 2 kv, head_dim 32,\n"
        "          intermediate 256, vocab 512, bf16) with the tiny byte-level BPE tokenizer.\n"
        "draft/  : a matching 2-layer DFlash drafter (z-lab layout, bf16).\n\n"
        "ALL WEIGHTS ARE RANDOM. The generated text is noise; `make run` demonstrates the pipeline\n"
        "(tokenize -> chat template -> prefill -> draft/verify cycles -> detokenize) and its stats.\n"
        "Regenerate with tools/ref/make_qwen3_fixtures.py and tools/ref/make_dflash_fixtures.py\n"
        "(see docs/FIXTURES.md).\n")
    print(f"default/target: {fc.dir_size(folder)/1024:.0f} KiB")


def main() -> None:
    fc.setup_determinism()
    tok = fc.build_tokenizer()
    only = set(sys.argv[1:])
    for name, spec in QWEN3_FIXTURES.items():
        if only and name not in only:
            continue
        make_qwen3_fixture(tok, name, spec)
    if not only or "default" in only:
        make_default_target(tok)


if __name__ == "__main__":
    main()
