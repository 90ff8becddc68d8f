#!/usr/bin/env python3
"""A tiny z-lab-gemma-4-style DFlash drafter + golden data (two draft cycles) on the tiny Gemma 4
target tests/fixtures/gemma4/dense_v5 (python3 tools/ref/make_gemma4_fixtures.py first).

The layout of z-lab/gemma-4-31B-it-DFlash (DFLASH-SPEC §1.4, ECOSYSTEM §5.2): a qwen3-type drafter
(2 norms per layer, SiLU) that borrows the target's embedding — Gemma's E × sqrt(H) — and the
target's tied head with the final soft-cap 30; 6 taps of which two are global target layers
([1, 3, 5, 7, 9, 11] here: 5 and 11 are the full-attention layers of the 12-layer target, as 23
and 35 are of the 60-layer 31B); layer_types mixing causal sliding layers (W = 4 here, 2048 on
the real one) and a non-causal full layer, i.e. two draft KV groups; block size 16.

Writes tests/fixtures/dflash/gemma4_mixed/{draft/, golden.safetensors, meta.json} in the format of
tools/ref/make_dflash_fixtures.py (docs/FIXTURES.md). The reference is tools/ref/dflash_ref.py (the
z-lab `dflash` package is not installed here); the Gemma specifics are applied around it exactly
as transformers' Gemma4 target applies them (scaled embedding, 30·tanh(logits/30)).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import dflash_ref  # noqa: E402
import fixture_common as fc  # noqa: E402
from make_dflash_fixtures import (A2, MIN_GAP, draft_config, draft_param_shapes,  # noqa: E402
                                  random_draft_weights, write_draft)

NAME = "gemma4_mixed"
TARGET = "gemma4/dense_v5"
SPEC = dict(layout="zlab", layers=5, taps=[1, 3, 5, 7, 9, 11], block=16, seed=9101,
            cfg={"layer_types": ["sliding_attention"] * 4 + ["full_attention"], "sliding_window": 4,
                 "use_sliding_window": True, "rope_theta": 1000000.0,
                 "final_logit_softcapping": 30.0, "max_position_embeddings": 512})


def load_target():
    from transformers import Gemma4ForCausalLM
    m = Gemma4ForCausalLM.from_pretrained(str(fc.FIXTURES / TARGET), dtype=torch.float32,
                                          attn_implementation="eager")
    m.eval()
    return m


@torch.no_grad()
def target_taps(model, ids, layer_ids):
    """Residual stream after each tapped decoder layer (after layer_scalar), concatenated."""
    outs = {}
    hooks = []
    for lid in layer_ids:
        def hook(m, a, o, lid=lid):
            outs[lid] = o[0] if isinstance(o, tuple) else o
        hooks.append(model.model.layers[lid].register_forward_hook(hook))
    try:
        logits = model(input_ids=ids[None].long(), use_cache=False).logits[0]
    finally:
        for h in hooks:
            h.remove()
    return torch.cat([outs[lid][0] for lid in layer_ids], -1), logits


def main():
    fc.setup_determinism()
    tok = fc.build_tokenizer()
    mask_id = fc.token_ids(tok)["<|MASK|>"]
    target = load_target()
    from safetensors.torch import load_file
    tg = load_file(str(fc.FIXTURES / TARGET / "golden.safetensors"))
    prompt, greedy = tg["prompt_ids"].long(), tg["greedy_ids"].long()
    n = prompt.numel()
    tc = target.config
    assert [tc.layer_types[i] for i in SPEC["taps"]].count("full_attention") == 2
    taps, tlogits = target_taps(target, prompt, SPEC["taps"])
    anchor = int(torch.argmax(tlogits[-1]))
    assert anchor == int(greedy[0])
    seq2 = torch.cat([prompt, greedy[:A2 + 1]])
    taps2_full, logits2 = target_taps(target, seq2, SPEC["taps"])
    assert torch.equal(torch.argmax(logits2[n - 1:], -1), greedy[:A2 + 2])
    assert float((taps2_full[:n] - taps).abs().max()) < 1e-5
    cyc2_taps, cyc2_anchor = taps2_full[n:n + A2 + 1], int(greedy[A2 + 1])

    # The target's input embedding (Gemma4TextScaledWordEmbedding) and head (tied, soft-capped).
    E = target.model.embed_tokens.weight.detach()
    E_in = target.model.embed_tokens(torch.arange(E.shape[0])[None])[0].detach()
    assert torch.equal(E_in, E * torch.tensor(tc.hidden_size ** 0.5, dtype=E.dtype))
    cap = float(tc.final_logit_softcapping)

    def head(h):
        return cap * torch.tanh((h @ E.T) / cap)

    with torch.no_grad():  # head() is the target's own: its logits from the last tap (layer 11)
        last = taps[:, -tc.hidden_size:]
        assert float((head(target.model.norm(last)) - tlogits).abs().max()) < 1e-5

    folder = fc.fresh_dir(fc.FIXTURES / "dflash" / NAME)
    ddir = folder / "draft"
    cfg = draft_config(SPEC, tc.num_hidden_layers, mask_id)
    shapes = draft_param_shapes(cfg, len(SPEC["taps"]), tc.hidden_size)
    seed = SPEC["seed"]
    for _ in range(50):
        weights = random_draft_weights(shapes, seed)
        fc.fresh_dir(ddir)
        write_draft(ddir, cfg, weights, "zlab")
        rcfg, rw, rmask = dflash_ref.load_draft(ddir)
        ref = dflash_ref.DFlashRef(rcfg, rw, rmask)
        assert ref.target_layer_ids == SPEC["taps"]
        ids1 = torch.tensor([anchor] + [mask_id] * (SPEC["block"] - 1))
        h1 = ref.forward(taps, 0, ref.embed_block(ids1, E_in), n)
        l1 = head(h1[1:])
        start2 = n + A2 + 1
        ids2 = torch.tensor([cyc2_anchor] + [mask_id] * (SPEC["block"] - 1))
        h2 = ref.forward(cyc2_taps, n, ref.embed_block(ids2, E_in), start2)
        l2 = head(h2[1:])
        gaps = torch.cat([fc.top2_gap(l1), fc.top2_gap(l2)])
        if float(gaps.min()) > MIN_GAP:
            break
        seed += 1
    else:
        raise RuntimeError(NAME)
    assert ref.layer_attn == [(4, True)] * 4 + [(None, False)], ref.layer_attn

    # Self-checks: incremental context == whole context; fp64 headroom; feature sensitivity.
    ref2 = dflash_ref.DFlashRef(rcfg, rw, rmask)
    h2_full = ref2.forward(torch.cat([taps, cyc2_taps]), 0, ref2.embed_block(ids2, E_in), start2)
    inc_vs_full = float((h2_full - h2).abs().max())
    assert inc_vs_full < 1e-5, inc_vs_full
    ref64 = dflash_ref.DFlashRef(rcfg, rw, rmask, dtype=torch.float64)
    f64 = float((ref64.forward(taps.double(), 0, ref64.embed_block(ids1, E_in.double()), n) - h1.double()).abs().max())
    sens = {}
    r_unscaled = dflash_ref.DFlashRef(rcfg, rw, rmask)
    sens["embedding_unscaled"] = float((head(r_unscaled.forward(taps, 0, r_unscaled.embed_block(ids1, E), n)[1:])
                                        - l1).abs().max())
    sens["no_softcap"] = float(((h1[1:] @ E.T) - l1).abs().max())
    for label, edit in (("all_causal", dict(is_causal=True)), ("all_noncausal", dict(is_causal=False)),
                        ("window_plus_1", dict(sliding_window=5))):
        c = dict(rcfg, **edit)
        r = dflash_ref.DFlashRef(c, rw, rmask)
        sens[label] = float((head(r.forward(taps, 0, r.embed_block(ids1, E_in), n)[1:]) - l1).abs().max())
    for k, v in sens.items():
        assert v > 1e-2, (k, v)

    golden = {
        "prompt_ids": fc.i32(prompt), "target_layer_ids": fc.i32(SPEC["taps"]), "taps": fc.f32(taps),
        "ctx_features": fc.f32(ref.context_features(taps)), "anchor": fc.i32([anchor]),
        "block_ids": fc.i32(ids1), "block_hidden": fc.f32(h1), "block_logits": fc.f32(l1),
        "draft_ids": fc.i32(torch.argmax(l1, -1)), "cycle2_accepted": fc.i32([A2]),
        "cycle2_ctx_start_pos": fc.i32([n]), "cycle2_new_ctx_taps": fc.f32(cyc2_taps),
        "cycle2_start_pos": fc.i32([start2]), "cycle2_block_ids": fc.i32(ids2),
        "cycle2_block_hidden": fc.f32(h2), "cycle2_block_logits": fc.f32(l2),
        "cycle2_draft_ids": fc.i32(torch.argmax(l2, -1)),
    }
    fc.save_safetensors(golden, folder / "golden.safetensors")
    meta = {
        "target": f"tests/fixtures/{TARGET}", "draft": "draft", "layout": "zlab",
        "golden_reference": "tools/ref/dflash_ref.py + the Gemma 4 target's scaled embedding and "
                            "soft-capped tied head (transformers "
                            f"{__import__('transformers').__version__} Gemma4ForCausalLM)",
        "also_checked_with": None, "package_vs_dflash_ref_max_abs_diff": None,
        "dflash_ref_incremental_vs_full_context_max_abs_diff": inc_vs_full,
        "fp32_vs_fp64_block_hidden_max_abs_diff": f64, "seed": seed,
        "draft_min_top2_gap": round(float(gaps.min()), 6), "n_prompt": n, "block_size": SPEC["block"],
        "mask_token_id": mask_id, "resolved_layers_[window,causal]": [list(x) for x in ref.layer_attn],
        "target_tap_layer_types": [tc.layer_types[i] for i in SPEC["taps"]],
        "embed_scale": tc.hidden_size ** 0.5, "final_logit_softcapping": cap,
        "feature_sensitivity_max_abs_block_logit_change": {k: round(v, 4) for k, v in sens.items()},
        "tensors": {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in golden.items()},
    }
    fc.write_json(folder / "meta.json", meta)
    print(f"dflash/{NAME}: seed {seed}, n={n}, gap {float(gaps.min()):.3e}, inc/full {inc_vs_full:.1e}, "
          f"fp64 {f64:.1e}, drafts {golden['draft_ids'].tolist()} / {golden['cycle2_draft_ids'].tolist()}, "
          f"sensitivity {meta['feature_sensitivity_max_abs_block_logit_change']}, {fc.dir_size(folder)/1024:.0f} KiB")


if __name__ == "__main__":
    main()
