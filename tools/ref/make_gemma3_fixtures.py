#!/usr/bin/env python3
"""Tiny random Gemma 3 text checkpoints + golden data from Hugging Face transformers (the oracle).

Writes tests/fixtures/gemma3/<name>/: config.json, model.safetensors, tokenizer files,
golden.safetensors (prompt_ids, logits [n,V], embed [n,H] (scaled by sqrt(H)), layer_out [L,n,H],
greedy_ids [32], greedy_logits [32,V]) and golden.json.

  sw_v5         6 layers (5 sliding of W=8, layer 5 global), query_pre_attn_scalar 24 != head_dim,
                the transformers-5 config (rope_parameters per layer type, layer_types)
  hub_linear    the hub (transformers 4.x) config layout of Gemma-3-4B+: rope_theta 1e6 global with
                linear x8 scaling, rope_local_base_freq 1e4, sliding_window_pattern 6; plus a
                Gemma-2-style final_logit_softcapping of 30

Run from the repo root with transformers 5.x:  python3 tools/ref/make_gemma3_fixtures.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import fixture_common as fc  # noqa: E402
from make_qwen3_fixtures import GREEDY_STEPS, MIN_GAP, PROMPT_LONG, forward_capture  # noqa: E402

FIXTURES = {
    "sw_v5": dict(layers=6, seed=5101, config_style="v5", softcap=None, rope_scaling=None),
    "hub_linear": dict(layers=6, seed=5201, config_style="hub", softcap=30.0,
                       rope_scaling={"rope_type": "linear", "factor": 8.0}),
}


def make_config(vocab, ids, spec):
    from transformers import Gemma3TextConfig
    full = {"rope_type": "default", "rope_theta": 1000000.0}
    if spec["rope_scaling"]:
        full = dict(spec["rope_scaling"], rope_theta=1000000.0)
    cfg = Gemma3TextConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=spec["layers"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-6, sliding_window=8, query_pre_attn_scalar=24,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": full},
        final_logit_softcapping=spec["softcap"], tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=None)
    cfg.architectures = ["Gemma3ForCausalLM"]
    cfg._attn_implementation = "eager"
    cfg.dtype = "float32"
    return cfg


def build_model(cfg, seed):
    from transformers import Gemma3ForCausalLM
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(cfg).to(torch.float32)
    model.config._attn_implementation = "eager"
    fc.random_init_(model, seed, std=0.15, norm_jitter=0.1)
    # Gemma stores zero-centred norm weights (applied as 1 + w): centre them at 0 like real ones.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.sub_(1.0)
    model.eval()
    return model


@torch.no_grad()
def greedy_cached(model, ids, steps):
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    logits = out.logits[0, -1]
    toks, rows = [], []
    for _ in range(steps):
        t = int(torch.argmax(logits))
        toks.append(t)
        rows.append(logits.clone())
        out = model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)
        logits = out.logits[0, -1]
    return torch.tensor(toks), torch.stack(rows, 0)


def hub_config(folder: Path) -> None:
    """The transformers-4.x layout of the real Gemma 3 hub configs."""
    p = folder / "config.json"
    cfg = json.loads(p.read_text())
    rp = cfg.pop("rope_parameters")
    cfg.pop("layer_types", None)
    cfg["rope_theta"] = rp["full_attention"]["rope_theta"]
    cfg["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
    sc = {k: v for k, v in rp["full_attention"].items() if k != "rope_theta"}
    cfg["rope_scaling"] = None if sc.get("rope_type") == "default" else sc
    cfg["sliding_window_pattern"] = cfg.pop("_sliding_window_pattern", 6)
    cfg["torch_dtype"] = cfg.pop("dtype", "float32")
    cfg["transformers_version"] = "4.50.0"
    fc.write_json(p, dict(sorted(cfg.items())))


def make_fixture(tok, name, spec):
    vocab = tok.get_vocab_size()
    folder = fc.fresh_dir(fc.FIXTURES / "gemma3" / name)
    prompt_ids = torch.tensor([tok.encode(PROMPT_LONG).ids])
    n = prompt_ids.shape[1]
    seed = spec["seed"]
    for _ in range(50):
        model = build_model(make_config(vocab, fc.token_ids(tok), spec), seed)
        g_ids, g_logits = greedy_cached(model, prompt_ids, GREEDY_STEPS)
        gaps = fc.top2_gap(g_logits)
        if float(gaps.min()) > MIN_GAP and len(set(g_ids.tolist())) >= 4:
            break
        seed += 1
    else:
        raise RuntimeError(f"{name}: no seed with margins")
    logits, embed, layer_out = forward_capture(model, prompt_ids)
    full = torch.cat([prompt_ids, g_ids[None, :-1]], 1)
    lf, _, _ = forward_capture(model, full)
    assert torch.equal(torch.argmax(lf[n - 1:], -1), g_ids), "cached vs uncached greedy mismatch"
    model.save_pretrained(str(folder))
    if spec["config_style"] == "hub":
        hub_config(folder)
    fc.write_tokenizer_files(tok, folder)
    from transformers import Gemma3ForCausalLM
    m2 = Gemma3ForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager")
    d = float((m2(input_ids=prompt_ids, use_cache=False).logits[0] - logits).abs().max())
    assert d == 0.0, f"reloaded checkpoint differs by {d}"
    golden = {"prompt_ids": fc.i32(prompt_ids[0]), "logits": fc.f32(logits), "embed": fc.f32(embed),
              "layer_out": fc.f32(layer_out), "greedy_ids": fc.i32(g_ids),
              "greedy_logits": fc.f32(g_logits)}
    fc.save_safetensors(golden, folder / "golden.safetensors")
    fc.write_json(folder / "golden.json", {
        "reference": f"transformers {__import__('transformers').__version__} Gemma3ForCausalLM, "
                     "attn_implementation=eager, float32, CPU",
        "seed": seed, "prompt_text": PROMPT_LONG, "n_prompt": n, "greedy_steps": GREEDY_STEPS,
        "greedy_min_top2_gap": round(float(gaps.min()), 6), "config_style": spec["config_style"]})
    print(f"gemma3/{name}: seed {seed}, n={n}, min gap {float(gaps.min()):.3e}, "
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
