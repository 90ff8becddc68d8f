#!/usr/bin/env python3
"""A tiny reduced-vocabulary DFlash drafter in the vLLM speculators dialect + golden draft logits.

The oracle is the PyPI `speculators` 0.9.0 package itself: its `DFlashSpeculatorConfig` and
`DFlashDraftModel` (speculators/models/dflash) are instantiated on CPU, given random weights, the
target's embedding and the d2t/t2d maps its own `build_vocab_mappings_from_distribution` makes, and
saved with its own `save_pretrained` (so config.json and the tensor names/dtypes are exactly what the
package writes: lm_head.weight [draft_vocab, H], d2t int64 [draft_vocab], t2d bool [vocab]).
The golden logits come from the package's own forward (`_backbone_forward`, eager attention): one
anchor block at position n whose queries see the context features of positions < n, exactly one
inference draft step. Drafts are mapped back with target = draft + d2t[draft].

Also written: the same drafter in the z-lab layout (config.json with `draft_vocab_size`,
model.safetensors with lm_head.weight and d2t only, no t2d), which must draft identically.

Writes, per CONFIGS entry, tests/fixtures/dflash/<name>/{draft,draft_zlab}/, golden.safetensors,
meta.json: speculators_d2t for the tiny Qwen3 target qwen3/tied_gqa2 (hidden 64, block 8) and
speculators_d2t_qwen35 for the tiny Qwen3.5 hybrid qwen35/flat_untied (hidden 48, 4 layers, taps
[1, 3], block 16). Needs those target fixtures (make_qwen3_fixtures.py, make_qwen35_fixtures.py).
Names on the command line pick entries (default: all).

Run from the repo root with a Python where `speculators` imports, e.g.
  python3 -m venv /tmp/venv-spec
  echo /work/venv-gguf/lib/python3.11/site-packages > /tmp/venv-spec/lib/python3.11/site-packages/base.pth
  /tmp/venv-spec/bin/pip install --no-deps speculators==0.9.0
  /tmp/venv-spec/bin/pip install openai loguru pydantic-settings "datasets<=5.1.0,>=4.0.0" hs-connectors==0.9.0
  /tmp/venv-spec/bin/python tools/ref/make_speculators_fixtures.py
(speculators 0.9.0 pins torch<=2.14.1 / transformers<=5.19; the generator ran with torch 2.15.0 and
transformers 5.24.0, recorded in meta.json.)
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import fixture_common as fc  # noqa: E402

# One entry per target: output folder (under tests/fixtures/dflash) -> the target fixture, its
# transformers class, the z-lab tap ids (target layer outputs; aux ids = +1), block size, seed.
CONFIGS = {
    "speculators_d2t": {"target": "qwen3/tied_gqa2", "arch": "Qwen3ForCausalLM", "taps": [0, 1],
                        "block": 8, "seed": 12001},
    # Qwen3.5 hybrid (Gated DeltaNet + gated attention, hidden 48, 4 layers): block 16.
    "speculators_d2t_qwen35": {"target": "qwen35/flat_untied", "arch": "Qwen3_5ForCausalLM",
                               "taps": [1, 3], "block": 16, "seed": 12101},
}
TARGET = TAPS = BLOCK = SEED = None  # set per entry by use_config()
DRAFT_VOCAB = 96       # of the target's 512
A2 = 2                 # tokens "accepted" in cycle 1
MIN_GAP = 5e-3


def use_config(name: str) -> None:
    global TARGET, TAPS, BLOCK, SEED
    c = CONFIGS[name]
    TARGET, TAPS, BLOCK, SEED = c["target"], c["taps"], c["block"], c["seed"]


def target_arch() -> str:
    return next(c["arch"] for c in CONFIGS.values() if c["target"] == TARGET)


def load_target(path: Path):
    import transformers
    cls = getattr(transformers, target_arch())
    m = cls.from_pretrained(str(path), dtype=torch.float32, attn_implementation="eager")
    return m.eval()


@torch.no_grad()
def target_taps(model, ids: torch.Tensor, layer_ids: list[int]):
    outs, hooks = {}, []
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


def build_speculator(target, tdir: Path, token_freq: dict[int, int], mask_id: int, seed: int):
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution
    from transformers import Qwen3Config

    tc = target.config
    tl = Qwen3Config(vocab_size=tc.vocab_size, hidden_size=tc.hidden_size, intermediate_size=64,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                     max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0,
                     tie_word_embeddings=False)
    tl._attn_implementation = "eager"
    cfg = DFlashSpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=DRAFT_VOCAB, block_size=BLOCK,
        aux_hidden_state_layer_ids=[t + 1 for t in TAPS], mask_token_id=mask_id,
        speculators_config=SpeculatorsConfig(
            algorithm="dflash",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=BLOCK - 1)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=f"tests/fixtures/{TARGET}",
                                    architectures=[target_arch()])))
    model = DFlashDraftModel(cfg).eval()
    d2t, t2d = build_vocab_mappings_from_distribution(token_freq, DRAFT_VOCAB, tc.vocab_size)
    model.load_vocab_mappings(t2d, d2t)
    with torch.no_grad():
        model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        model.verifier_lm_head.weight.copy_(target.lm_head.weight[t2d])
        model.verifier_norm.weight.copy_(target.model.norm.weight)
        g = torch.Generator().manual_seed(seed)
        params = dict(model.named_parameters())
        for name in sorted(params):
            if name.startswith(("embed_tokens.", "verifier_")):
                continue
            r = torch.randn(params[name].shape, generator=g, dtype=torch.float64)
            val = 1.0 + 0.1 * r if ("norm" in name and r.dim() == 1) else 0.15 * r
            params[name].copy_(val.float())
    return model, d2t, t2d


@torch.no_grad()
def package_draft(model, taps_ctx: torch.Tensor, ids_ctx: torch.Tensor, anchor: int) -> torch.Tensor:
    """One inference draft step through the package's forward: the anchor block at position
    n = len(ids_ctx) sees context features of positions < n. Returns block logits [B, Vd]."""
    n, W = taps_ctx.shape
    H = model.config.transformer_layer_config.hidden_size
    T = n + BLOCK + 1                 # select_anchors excludes the last BLOCK positions
    hs = torch.zeros(1, T, W)
    hs[0, :n] = taps_ctx
    ids = torch.zeros(1, T, dtype=torch.long)
    ids[0, :n] = ids_ctx
    ids[0, n] = anchor
    loss_mask = torch.zeros(1, T, dtype=torch.long)
    loss_mask[0, n] = 1               # the only valid anchor
    _, logits, _, _, blk = model._backbone_forward(
        hs, ids, loss_mask, torch.zeros(1, T, H), torch.zeros(1, T, dtype=torch.long), max_anchors=1)
    assert blk.tolist() == list(range(n, n + BLOCK)), blk
    return logits[0].float()


def make(name: str) -> None:
    use_config(name)
    fc.setup_determinism()
    import importlib.metadata as md
    from safetensors.torch import load_file
    tok = fc.build_tokenizer()
    mask_id = fc.token_ids(tok)["<|MASK|>"]
    tdir = fc.FIXTURES / TARGET
    target = load_target(tdir)
    tg = load_file(str(tdir / "golden.safetensors"))
    prompt, greedy = tg["prompt_ids"].long(), tg["greedy_ids"].long()
    n = prompt.numel()
    taps, tlogits = target_taps(target, prompt, TAPS)
    anchor = int(torch.argmax(tlogits[-1]))
    assert anchor == int(greedy[0])
    seq2 = torch.cat([prompt, greedy[:A2 + 1]])
    taps2, _ = target_taps(target, seq2, TAPS)
    anchor2 = int(greedy[A2 + 1])
    # Token frequencies of the fixture corpus (plus the target's greedy continuation, so drafts can
    # be accepted): the package picks the DRAFT_VOCAB most frequent ids.
    freq = Counter()
    for line in fc._CORPUS_EN.splitlines():
        freq.update(tok.encode(line).ids)
    freq.update({int(t): 1000 for t in greedy.tolist()})

    folder = fc.fresh_dir(fc.FIXTURES / "dflash" / name)
    ddir = folder / "draft"
    seed = SEED
    for _ in range(50):
        model, d2t, t2d = build_speculator(target, tdir, dict(freq), mask_id, seed)
        l1 = package_draft(model, taps, prompt, anchor)[1:]
        l2 = package_draft(model, taps2, seq2, anchor2)[1:]
        gaps = torch.cat([fc.top2_gap(l1), fc.top2_gap(l2)])
        if float(gaps.min()) > MIN_GAP:
            break
        seed += 1
    else:
        raise RuntimeError("no seed")
    model.save_pretrained(str(ddir))
    (ddir / "config.py").unlink(missing_ok=True)  # the package's own source (auto_map), not ours to ship
    # Reload through the package to prove the saved folder is what it reads back (its
    # from_pretrained runs the simple_flex_attention path: a second attention implementation).
    from speculators.models.dflash import DFlashDraftModel
    re = DFlashDraftModel.from_pretrained(str(ddir), attn_implementation="eager").eval()
    with torch.no_grad():
        re.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
    reload_diff = float((package_draft(re, taps, prompt, anchor)[1:] - l1).abs().max())
    assert reload_diff == 0.0, reload_diff
    saved = load_file(str(ddir / "model.safetensors"))
    assert saved["d2t"].dtype == torch.int64 and saved["t2d"].dtype == torch.bool

    # The z-lab layout of the same drafter: config.json with draft_vocab_size, d2t but no t2d.
    zdir = folder / "draft_zlab"
    zdir.mkdir()
    zcfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "attention_bias": False,
            "head_dim": 16, "hidden_act": "silu", "hidden_size": int(target.config.hidden_size),
            "intermediate_size": 64,
            "max_position_embeddings": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 2, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "vocab_size": 512, "block_size": BLOCK,
            "num_target_layers": target.config.num_hidden_layers, "draft_vocab_size": DRAFT_VOCAB,
            "dflash_config": {"mask_token_id": mask_id, "target_layer_ids": TAPS},
            "layer_types": ["full_attention"] * 2, "torch_dtype": "float32"}
    fc.write_json(zdir / "config.json", zcfg)
    fc.save_safetensors({k: v for k, v in saved.items() if k != "t2d"}, zdir / "model.safetensors")

    ids1 = torch.argmax(l1, -1)
    ids2 = torch.argmax(l2, -1)
    golden = {
        "prompt_ids": fc.i32(prompt), "taps": fc.f32(taps), "anchor": fc.i32([anchor]),
        "block_ids": fc.i32([anchor] + [mask_id] * (BLOCK - 1)),
        "block_logits": fc.f32(l1),                        # [B-1, draft_vocab]
        "draft_ids": fc.i32(ids1),                         # draft vocabulary
        "draft_target_ids": fc.i32(ids1 + d2t[ids1]),      # target vocabulary
        "cycle2_new_ctx_taps": fc.f32(taps2[n:n + A2 + 1]),
        "cycle2_start_pos": fc.i32([n + A2 + 1]),
        "cycle2_block_ids": fc.i32([anchor2] + [mask_id] * (BLOCK - 1)),
        "cycle2_block_logits": fc.f32(l2),
        "cycle2_draft_target_ids": fc.i32(ids2 + d2t[ids2]),
        "d2t": d2t.to(torch.int64),
    }
    fc.save_safetensors(golden, folder / "golden.safetensors")
    # How far the drafter's own head is from the target head on the same rows (a C++ that used
    # the target's lm_head could not match).
    meta = {
        "target": f"tests/fixtures/{TARGET}", "draft": "draft", "draft_zlab": "draft_zlab",
        "golden_reference": f"speculators {md.version('speculators')} DFlashDraftModel._backbone_forward "
                            f"(eager attention; torch {torch.__version__}, transformers "
                            f"{md.version('transformers')})",
        "seed": seed, "n_prompt": n, "block_size": BLOCK, "draft_vocab_size": DRAFT_VOCAB,
        "vocab_size": int(target.config.vocab_size), "mask_token_id": mask_id,
        "target_layer_ids": TAPS, "aux_hidden_state_layer_ids": [t + 1 for t in TAPS],
        "d2t_convention": "target_id = draft_id + d2t[draft_id]",
        "draft_min_top2_gap": round(float(gaps.min()), 6),
        "reload_vs_built_max_abs_diff": reload_diff,
        "tensors": {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in golden.items()},
        "draft_tensors": {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}"
                          for k, v in sorted(saved.items())},
    }
    fc.write_json(folder / "meta.json", meta)
    print(f"dflash/{name}: seed {seed}, gap {float(gaps.min()):.3e}, drafts "
          f"{golden['draft_target_ids'].tolist()} / {golden['cycle2_draft_target_ids'].tolist()}, "
          f"{fc.dir_size(folder) / 1024:.0f} KiB")


def main() -> None:
    names = sys.argv[1:] or list(CONFIGS)
    for name in names:
        if name not in CONFIGS:
            raise SystemExit(f"unknown fixture {name!r}; choose from {list(CONFIGS)}")
    for name in names:
        make(name)


if __name__ == "__main__":
    main()
