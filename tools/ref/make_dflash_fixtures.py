#!/usr/bin/env python3
"""Tiny random DFlash drafters + golden data (two draft cycles) against the tiny Qwen3 targets.

Needs the target fixtures (python3 tools/ref/make_qwen3_fixtures.py first). Writes
  tests/fixtures/dflash/<name>/draft/   checkpoint in the published layout (z-lab or MiMo)
  tests/fixtures/dflash/<name>/golden.safetensors, meta.json
  tests/fixtures/default/draft/         2-layer z-lab-layout bf16 drafter for the default target

Goldens come from the z-lab `dflash` package (DFlashDraftModel) where it supports the variant, and
from tools/ref/dflash_ref.py otherwise; the two are cross-checked wherever both apply.
Deterministic (CPU, one thread, fixed seeds). Semantics: docs/FIXTURES.md.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dflash_ref  # noqa: E402
import fixture_common as fc  # noqa: E402

MIN_GAP = 5e-3
A2 = 2          # tokens "accepted" in cycle 1 (taken from the target's greedy continuation)
XCHECK_TOL = 1e-5

BASE_CFG = {
    "attention_bias": False,
    "attention_dropout": 0.0,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
    "model_type": "qwen3",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 512,
}

DRAFTS = {
    # (a) z-lab layout, classic all-full non-causal drafter.
    "zlab_full": dict(
        target="sharded", layout="zlab", layers=2, taps=[0, 1], block=8, seed=5001,
        cfg={"layer_types": ["full_attention"] * 2, "sliding_window": None, "use_sliding_window": False},
    ),
    # (b) MiMo layout: model. prefix, 2 named shards, use_swa (non-causal SWA everywhere), sinks,
    #     value scale, backbone rotary base, partial rotary, mask_embedding.pt; taps include 0 and the
    #     LAST target layer (pre-final-norm residual).
    "mimo_style": dict(
        target="sharded", layout="mimo", layers=2, taps=[0, 1, 2], block=8, seed=6001,
        cfg={"rms_norm_eps": 1e-05, "partial_rotary_factor": 0.5, "v_head_dim": 16,
             "sliding_window": None, "use_sliding_window": False},
        dflash={"use_swa": True, "swa_window_size": 4, "attention_sink_bias": True,
                "attention_value_scale": 0.612, "backbone_rotary_base": 500000.0},
    ),
    # (c) Qwen3.6 style: layer_types sliding/full/sliding; sliding layers causal, full non-causal.
    "mixed_swa": dict(
        target="tied_gqa2", layout="zlab", layers=3, taps=[0, 1], block=8, seed=7001,
        cfg={"layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
             "sliding_window": 4, "use_sliding_window": True},
    ),
    # (d) DFlash2-style attention (no conv / selector): all sliding, top-level is_causal false ->
    #     symmetric windows.
    "dflash2_noncausal": dict(
        target="gqa4_yarn", layout="zlab", layers=2, taps=[0], block=8, seed=8001,
        cfg={"layer_types": ["sliding_attention"] * 2, "sliding_window": 3, "use_sliding_window": True,
             "is_causal": False},
    ),
}


# ---------------------------------------------------------------------------------------------
# Target side (HF transformers)
# ---------------------------------------------------------------------------------------------

def load_target(name_or_path: Path):
    from transformers import Qwen3ForCausalLM
    m = Qwen3ForCausalLM.from_pretrained(str(name_or_path), dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


@torch.no_grad()
def target_taps(model, ids: torch.Tensor, layer_ids: list[int]):
    """Residual stream after each tapped decoder layer (pre-final-norm), concatenated: [T, K*H]."""
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


def lm_head_weight(model) -> torch.Tensor:
    return model.lm_head.weight.detach()


# ---------------------------------------------------------------------------------------------
# Drafter weights / checkpoint layouts
# ---------------------------------------------------------------------------------------------

def draft_param_shapes(cfg: dict, k_taps: int, target_hidden: int) -> dict[str, tuple]:
    H, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    vd = cfg.get("v_head_dim", hd)
    inter = cfg["intermediate_size"]
    shapes = {"fc.weight": (H, k_taps * target_hidden), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    sinks = bool(dflash_ref.dflash_value(cfg, "attention_sink_bias", False))
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (H,),
            p + "post_attention_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (nh * hd, H),
            p + "self_attn.k_proj.weight": (nkv * hd, H),
            p + "self_attn.v_proj.weight": (nkv * vd, H),
            p + "self_attn.o_proj.weight": (H, nh * vd),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (inter, H),
            p + "mlp.up_proj.weight": (inter, H),
            p + "mlp.down_proj.weight": (H, inter),
        })
        if sinks:
            shapes[p + "self_attn.attention_sink_bias"] = (nh,)
    return shapes


def random_draft_weights(shapes: dict[str, tuple], seed: int, std: float = 0.15) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name in sorted(shapes):
        r = torch.randn(shapes[name], generator=g, dtype=torch.float64)
        if name.endswith("attention_sink_bias"):
            val = 0.5 + 1.0 * r          # sinks comparable to the attention logits
        elif "norm" in name:
            val = 1.0 + 0.1 * r
        else:
            val = std * r
        out[name] = val.to(torch.float32)
    return out


def draft_config(spec: dict, n_target_layers: int, mask_id: int, dtype: str = "float32") -> dict:
    cfg = dict(BASE_CFG)
    cfg.update(spec.get("cfg", {}))
    cfg["num_hidden_layers"] = spec["layers"]
    cfg["max_window_layers"] = spec["layers"]
    cfg["num_target_layers"] = n_target_layers
    cfg["block_size"] = spec["block"]
    cfg["torch_dtype"] = dtype
    dflash = {"mask_token_id": mask_id, "target_layer_ids": list(spec["taps"])}
    dflash.update(spec.get("dflash", {}))
    cfg["dflash_config"] = dflash
    cfg["architectures"] = ["DFlashDraftModel"]
    cfg["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
    cfg["transformers_version"] = "4.57.1"
    for k in ("dtype",):
        cfg.pop(k, None)
    return dict(sorted(cfg.items()))


def write_draft(folder: Path, cfg: dict, weights: dict[str, torch.Tensor], layout: str,
                mask_embedding: torch.Tensor | None = None, mask_id: int | None = None,
                dtype: torch.dtype = torch.float32) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    fc.write_json(folder / "config.json", cfg)
    w = {k: v.to(dtype) for k, v in weights.items()}
    if layout == "zlab":
        fc.save_safetensors(w, folder / "model.safetensors")
    elif layout == "mimo":
        w = {"model." + k: v for k, v in w.items()}
        first = {k: v for k, v in w.items()
                 if k.startswith(("model.fc.", "model.hidden_norm.", "model.layers.0."))}
        second = {k: v for k, v in w.items() if k not in first}
        names = [f"dflash_draft_model-0000{i}-of-00002.safetensors" for i in (1, 2)]
        fc.save_safetensors(first, folder / names[0])
        fc.save_safetensors(second, folder / names[1])
        total = sum(v.numel() * v.element_size() for v in w.values())
        wm = {k: names[0] for k in first}
        wm.update({k: names[1] for k in second})
        fc.write_json(folder / "dflash_draft_model.safetensors.index.json",
                      {"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))})
        if mask_embedding is not None:
            torch.save({"embedding": mask_embedding.to(dtype).clone(), "mask_token_id": int(mask_id)},
                       str(folder / "mask_embedding.pt"))
    else:
        raise ValueError(layout)


# ---------------------------------------------------------------------------------------------
# The z-lab package as reference (for the variants it supports)
# ---------------------------------------------------------------------------------------------

def package_supports(cfg: dict) -> bool:
    dc = cfg.get("dflash_config", {})
    unsupported = ("use_swa", "attention_sink_bias", "attention_value_scale", "backbone_rotary_base")
    if any(dc.get(k) for k in unsupported) or cfg.get("partial_rotary_factor", 1.0) != 1.0:
        return False
    if cfg.get("layer_types") and "sliding_attention" in cfg["layer_types"] and not cfg.get("use_sliding_window"):
        return False  # transformers' Qwen3Config drops sliding_window unless use_sliding_window
    return True


class PackageDrafter:
    """Drives dflash.DFlashDraftModel exactly like dflash_generate() does (cache, positions, crop)."""

    def __init__(self, folder: Path, weights: dict[str, torch.Tensor]):
        from dflash.model import DFlashDraftModel, _make_cache
        from transformers import Qwen3Config
        config = Qwen3Config.from_pretrained(str(folder))
        config._attn_implementation = "sdpa"
        self.model = DFlashDraftModel(config).to(torch.float32).eval()
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
        self.cache = _make_cache(config)

    @torch.no_grad()
    def draft(self, new_ctx_taps, ctx_start, block_embeds, start):
        from dflash.model import _crop_to
        B = block_embeds.shape[0]
        pos = torch.arange(ctx_start, start + B)[None]
        hid = self.model(target_hidden=new_ctx_taps[None], noise_embedding=block_embeds[None],
                         position_ids=pos, past_key_values=self.cache, use_cache=True)
        _crop_to(self.cache, start)
        return hid[0]


# ---------------------------------------------------------------------------------------------
# Fixture generation
# ---------------------------------------------------------------------------------------------

def run_cycles(draft_runner, ref_embed, lm_w, taps, n, anchor, block, mask_id, cyc2_taps, cyc2_anchor):
    """Cycle 1 (whole prompt as context) and cycle 2 (A2+1 new context rows). Returns dict."""
    ids1 = torch.tensor([anchor] + [mask_id] * (block - 1))
    h1 = draft_runner(taps, 0, ref_embed(ids1), n)
    l1 = h1[1:] @ lm_w.T
    start2 = n + A2 + 1
    ids2 = torch.tensor([cyc2_anchor] + [mask_id] * (block - 1))
    h2 = draft_runner(cyc2_taps, n, ref_embed(ids2), start2)
    l2 = h2[1:] @ lm_w.T
    return dict(ids1=ids1, h1=h1, l1=l1, ids2=ids2, h2=h2, l2=l2, start2=start2)


def make_drafter_fixture(tok, name: str, spec: dict) -> dict:
    ids_map = fc.token_ids(tok)
    mask_id = ids_map["<|MASK|>"]
    tdir = fc.FIXTURES / "qwen3" / spec["target"]
    target = load_target(tdir)
    from safetensors.torch import load_file
    tg = load_file(str(tdir / "golden.safetensors"))
    prompt = tg["prompt_ids"].long()
    greedy = tg["greedy_ids"].long()
    n = prompt.numel()
    taps, tlogits = target_taps(target, prompt, spec["taps"])
    anchor = int(torch.argmax(tlogits[-1]))
    assert anchor == int(greedy[0]), "anchor disagrees with the target fixture's greedy token"
    # Cycle 2 context: taps of the anchor and the A2 accepted tokens (= the target's greedy tokens).
    seq2 = torch.cat([prompt, greedy[:A2 + 1]])
    taps2_full, logits2 = target_taps(target, seq2, spec["taps"])
    assert torch.equal(torch.argmax(logits2[n - 1:], -1), greedy[:A2 + 2])
    assert float((taps2_full[:n] - taps).abs().max()) < 1e-5
    cyc2_taps = taps2_full[n:n + A2 + 1]
    cyc2_anchor = int(greedy[A2 + 1])
    E = target.model.embed_tokens.weight.detach()
    lm_w = lm_head_weight(target)
    H_t = target.config.hidden_size
    n_tl = target.config.num_hidden_layers

    folder = fc.fresh_dir(fc.FIXTURES / "dflash" / name)
    ddir = folder / "draft"
    cfg = draft_config(spec, n_tl, mask_id)
    shapes = draft_param_shapes(cfg, len(spec["taps"]), H_t)
    seed = spec["seed"]
    for attempt in range(50):
        weights = random_draft_weights(shapes, seed)
        mask_emb = None
        if spec["layout"] == "mimo":
            g = torch.Generator().manual_seed(seed + 100000)
            mask_emb = (0.15 * torch.randn(cfg["hidden_size"], generator=g, dtype=torch.float64)).float()
        fc.fresh_dir(ddir)
        write_draft(ddir, cfg, weights, spec["layout"], mask_emb, mask_id)
        # Reference 1: dflash_ref (always), loaded back from the written files.
        rcfg, rw, rmask = dflash_ref.load_draft(ddir)
        ref = dflash_ref.DFlashRef(rcfg, rw, rmask)
        assert ref.target_layer_ids == spec["taps"]
        res_ref = run_cycles(lambda t, cs, e, s: ref.forward(t, cs, e, s), lambda ids: ref.embed_block(ids, E),
                             lm_w, taps, n, anchor, spec["block"], mask_id, cyc2_taps, cyc2_anchor)
        gaps = torch.cat([fc.top2_gap(res_ref["l1"]), fc.top2_gap(res_ref["l2"])])
        if float(gaps.min()) > MIN_GAP:
            break
        print(f"  {name}: seed {seed} rejected (min draft gap {float(gaps.min()):.2e})")
        seed += 1
    else:
        raise RuntimeError(name)

    xcheck = {}
    golden_src = "tools/ref/dflash_ref.py"
    res = res_ref
    if package_supports(cfg):
        pkg = PackageDrafter(ddir, weights)
        res_pkg = run_cycles(pkg.draft, lambda ids: F.embedding(ids, E), lm_w, taps, n, anchor, spec["block"],
                             mask_id, cyc2_taps, cyc2_anchor)
        for key in ("h1", "l1", "h2", "l2"):
            xcheck[key] = float((res_pkg[key] - res_ref[key]).abs().max())
        assert max(xcheck.values()) < XCHECK_TOL, (name, xcheck)
        res = res_pkg
        golden_src = f"dflash {__import__('importlib.metadata').metadata.version('dflash')} DFlashDraftModel"
    # Extra self-checks of dflash_ref: (1) incremental cache == recomputing the whole context;
    ref2 = dflash_ref.DFlashRef(rcfg, rw, rmask)
    all_taps = torch.cat([taps, cyc2_taps])
    h2_full = ref2.forward(all_taps, 0, ref2.embed_block(res_ref["ids2"], E), res_ref["start2"])
    inc_vs_full = float((h2_full - res_ref["h2"]).abs().max())
    assert inc_vs_full < 1e-5, inc_vs_full
    # (2) float64 run of the same reference (numerical headroom of the golden).
    ref64 = dflash_ref.DFlashRef(rcfg, rw, rmask, dtype=torch.float64)
    h1_64 = ref64.forward(taps.double(), 0, ref64.embed_block(res_ref["ids1"], E.double()), n)
    f64_diff = float((h1_64 - res["h1"].double()).abs().max())

    # Sensitivity: how much each attention feature moves cycle 1's block logits (so a C++ test that
    # gets a feature wrong cannot pass by accident). MiMo also gets alternates with
    # attention_value_scale / backbone_rotary_base NOT applied (the open question of DFLASH-SPEC §8.2).
    def h1_with(cfg_edit=None, mask=rmask, **flags):
        c = json.loads(json.dumps(rcfg))
        if cfg_edit:
            cfg_edit(c)
        r = dflash_ref.DFlashRef(c, rw, mask, **flags)
        return r.forward(taps, 0, r.embed_block(res_ref["ids1"], E), n)

    def set_window(c, w):
        if c["dflash_config"].get("swa_window_size"):
            c["dflash_config"]["swa_window_size"] = w
        if c.get("sliding_window"):
            c["sliding_window"] = w

    windows = [w for w, _ in ref.layer_attn if w is not None]
    variants = {"all_causal": h1_with(lambda c: c.update(is_causal=True))}
    if any(not causal for _, causal in ref.layer_attn) and any(causal for _, causal in ref.layer_attn):
        variants["all_noncausal"] = h1_with(lambda c: c.update(is_causal=False))
    if windows:
        variants["windows_unbounded"] = h1_with(lambda c: set_window(c, 1_000_000))
        variants["window_plus_1"] = h1_with(lambda c: set_window(c, windows[0] + 1))
    alternates = {}
    if spec["layout"] == "mimo":
        alternates["alt_no_value_scale_block_hidden"] = h1_with(apply_value_scale=False)
        alternates["alt_no_backbone_base_block_hidden"] = h1_with(apply_backbone_base=False)
        alternates["alt_neither_block_hidden"] = h1_with(apply_value_scale=False, apply_backbone_base=False)
        variants.update({
            "value_scale_off": alternates["alt_no_value_scale_block_hidden"],
            "backbone_base_off": alternates["alt_no_backbone_base_block_hidden"],
            "sinks_off": h1_with(lambda c: c["dflash_config"].update(attention_sink_bias=False)),
            "mask_embedding_off": h1_with(mask=None),
            "partial_rotary_off": h1_with(lambda c: c.pop("partial_rotary_factor")),
        })
    sensitivity = {}
    for k, h in variants.items():
        sensitivity[k] = round(float(((h[1:] - res_ref["h1"][1:]) @ lm_w.T).abs().max()), 4)
        assert sensitivity[k] > 1e-2, (name, k, sensitivity[k])
    golden = {
        "prompt_ids": fc.i32(prompt),
        "target_layer_ids": fc.i32(spec["taps"]),
        "taps": fc.f32(taps),
        "ctx_features": fc.f32(ref.context_features(taps)),
        "anchor": fc.i32([anchor]),
        "block_ids": fc.i32(res["ids1"]),
        "block_hidden": fc.f32(res["h1"]),
        "block_logits": fc.f32(res["l1"]),
        "draft_ids": fc.i32(torch.argmax(res["l1"], -1)),
        "cycle2_accepted": fc.i32([A2]),
        "cycle2_ctx_start_pos": fc.i32([n]),
        "cycle2_new_ctx_taps": fc.f32(cyc2_taps),
        "cycle2_start_pos": fc.i32([res["start2"]]),
        "cycle2_block_ids": fc.i32(res["ids2"]),
        "cycle2_block_hidden": fc.f32(res["h2"]),
        "cycle2_block_logits": fc.f32(res["l2"]),
        "cycle2_draft_ids": fc.i32(torch.argmax(res["l2"], -1)),
    }
    golden.update({k: fc.f32(v) for k, v in alternates.items()})
    assert torch.equal(golden["draft_ids"], torch.argmax(res_ref["l1"], -1).int())
    assert torch.equal(golden["cycle2_draft_ids"], torch.argmax(res_ref["l2"], -1).int())
    fc.save_safetensors(golden, folder / "golden.safetensors")
    layer_attn = [list(x) for x in ref.layer_attn]
    meta = {
        "target": f"tests/fixtures/qwen3/{spec['target']}",
        "draft": "draft",
        "layout": spec["layout"],
        "golden_reference": golden_src,
        "also_checked_with": "tools/ref/dflash_ref.py" if xcheck else None,
        "package_vs_dflash_ref_max_abs_diff": xcheck or None,
        "dflash_ref_incremental_vs_full_context_max_abs_diff": inc_vs_full,
        "fp32_vs_fp64_block_hidden_max_abs_diff": f64_diff,
        "seed": seed,
        "draft_min_top2_gap": round(float(gaps.min()), 6),
        "n_prompt": n,
        "block_size": spec["block"],
        "mask_token_id": mask_id,
        "resolved_layers_[window,causal]": layer_attn,
        "value_scale_applied": ref.value_scale,
        "context_rope_base": float(rcfg.get("dflash_config", {}).get("backbone_rotary_base") or rcfg["rope_theta"]),
        "block_rope_base": float(rcfg["rope_theta"]),
        "rotary_dims": ref.rot_dim,
        "feature_sensitivity_max_abs_block_logit_change": sensitivity,
        "tensors": {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in golden.items()},
    }
    fc.write_json(folder / "meta.json", meta)
    print(f"dflash/{name}: seed {seed}, n={n}, gap {float(gaps.min()):.3e}, xcheck {xcheck or '-'}, "
          f"inc/full {inc_vs_full:.1e}, fp64 {f64_diff:.1e}, drafts {golden['draft_ids'].tolist()} / "
          f"{golden['cycle2_draft_ids'].tolist()}, {fc.dir_size(folder)/1024:.0f} KiB")
    return meta


def mimo_neutral_check(tok) -> float:
    """dflash_ref with use_swa (no layer_types) + neutralised MiMo features vs the package with the
    equivalent layer_types/is_causal config: checks the §3.1 resolution path the package lacks."""
    spec = DRAFTS["mimo_style"]
    ddir = fc.FIXTURES / "dflash" / "mimo_style" / "draft"
    cfg, w, _ = dflash_ref.load_draft(ddir)
    cfg = json.loads(json.dumps(cfg))
    dc = cfg["dflash_config"]
    for k in ("attention_sink_bias", "attention_value_scale", "backbone_rotary_base"):
        dc.pop(k)
    cfg.pop("partial_rotary_factor")
    w = {k: v for k, v in w.items() if not k.endswith("attention_sink_bias")}
    ref = dflash_ref.DFlashRef(cfg, w, None)
    pcfg = dict(cfg)
    pcfg["dflash_config"] = {k: v for k, v in dc.items() if k not in ("use_swa", "swa_window_size")}
    pcfg.update(layer_types=["sliding_attention"] * cfg["num_hidden_layers"], use_sliding_window=True,
                sliding_window=dc["swa_window_size"], is_causal=False)
    tmp = Path("/tmp/dflash_mimo_neutral")
    fc.fresh_dir(tmp)
    fc.write_json(tmp / "config.json", pcfg)
    pkg = PackageDrafter(tmp, w)
    target = load_target(fc.FIXTURES / "qwen3" / spec["target"])
    from safetensors.torch import load_file
    tg = load_file(str(fc.FIXTURES / "dflash" / "mimo_style" / "golden.safetensors"))
    E = target.model.embed_tokens.weight.detach()
    n = tg["prompt_ids"].numel()
    a = ref.forward(tg["taps"], 0, ref.embed_block(tg["block_ids"], E), n)
    b = pkg.draft(tg["taps"], 0, F.embedding(tg["block_ids"].long(), E), n)
    d = float((a - b).abs().max())
    assert d < XCHECK_TOL, d
    return d


def make_default_draft(tok) -> None:
    tdir = fc.FIXTURES / "default" / "target"
    tcfg = json.loads((tdir / "config.json").read_text())
    spec = dict(layers=2, taps=[1, 2], block=16,
                cfg={"hidden_size": 128, "head_dim": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "intermediate_size": 128, "max_position_embeddings": 2048,
                     "layer_types": ["full_attention"] * 2, "sliding_window": None, "use_sliding_window": False})
    mask_id = fc.token_ids(tok)["<|MASK|>"]
    cfg = draft_config(spec, tcfg["num_hidden_layers"], mask_id, dtype="bfloat16")
    weights = random_draft_weights(draft_param_shapes(cfg, 2, tcfg["hidden_size"]), 9101)
    folder = fc.fresh_dir(fc.FIXTURES / "default" / "draft")
    write_draft(folder, cfg, weights, "zlab", dtype=torch.bfloat16)
    # Smoke test: the pair runs through both references.
    target = load_target(tdir)
    prompt = torch.tensor(tok.encode("The quick brown fox").ids)
    taps, logits = target_taps(target.float(), prompt, spec["taps"])
    rcfg, rw, _ = dflash_ref.load_draft(folder)
    ref = dflash_ref.DFlashRef(rcfg, rw)
    E = target.model.embed_tokens.weight.detach().float()
    ids = torch.tensor([int(torch.argmax(logits[-1]))] + [mask_id] * 15)
    h = ref.forward(taps, 0, ref.embed_block(ids, E), prompt.numel())
    pkg = PackageDrafter(folder, {k: v.to(torch.bfloat16).float() for k, v in weights.items()})
    d = float((pkg.draft(taps, 0, F.embedding(ids, E), prompt.numel()) - h).abs().max())
    assert d < XCHECK_TOL, d
    print(f"default/draft: {fc.dir_size(folder)/1024:.0f} KiB (package vs ref {d:.1e})")


def main() -> None:
    fc.setup_determinism()
    tok = fc.build_tokenizer()
    only = set(sys.argv[1:])
    for name, spec in DRAFTS.items():
        if only and name not in only:
            continue
        make_drafter_fixture(tok, name, spec)
    if not only or "mimo_style" in only:
        print(f"mimo_style neutralised use_swa check vs package: {mimo_neutral_check(tok):.1e}")
    if not only or "default" in only:
        make_default_draft(tok)


if __name__ == "__main__":
    main()
