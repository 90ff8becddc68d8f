#!/usr/bin/env python3
"""Tiny random DFlash2 drafters + golden data, the reference being PyPI `speculators` 0.9's own
DFlash2 classes (speculators/models/dflash2/model_definitions.py: Qwen3DFlash2DecoderLayer with its
GroupedDynamicCausalConv around attention and MLP, and CandidateSelector).

speculators' DFlash2DraftModel.forward is a training forward (random anchors, flex-attention masks),
so the drafter pass is assembled here from the package's modules exactly as that forward wires them
(fc -> hidden_norm for the context, target embedding of [anchor, MASK..], the package's decoder
layers with the KV-injection attention, final norm, the target's lm_head), with an explicit additive
mask (eager attention) for the layer windows. The selector walk at inference (absent from the
training package) follows vLLM #52816 / SGLang #35371: unary = top-k of the target-head logits,
then logits * output_multiplier and the final softcap; score_k = unary_k + <pred[prev] * proj(h),
succ[cand_k]> through the package's CandidateSelector.score_candidates; prev = anchor for the first
drafted slot, then the token chosen in the slot before; T = 0 takes the argmax, T > 0 samples
softmax(score / T) over the K candidates (that distribution is q for rejection sampling).

Writes
  tests/fixtures/dflash2/<name>/draft/    checkpoint + config.json in the published dialect
  tests/fixtures/dflash2/<name>/golden.safetensors, meta.json   (qwen3 targets: two draft cycles)
  tests/fixtures/dflash2/qwen35_flat/draft/   random drafter for the tiny Qwen3.5 target (no golden)
  tests/fixtures/configs/Qwen3.8-27B-DFlash2/config.json   the published drafter config
  tests/fixtures/dflash2/zlab_swa_gguf/draft.gguf   zlab_swa as a llama.cpp `dflash` GGUF

speculators pins torch<=2.14.1 / transformers<=5.19; the modules used here run unchanged on the
venv of tools/requirements.txt (torch 2.15, transformers 5.24). Install the package and the
few modules its top-level import pulls in without touching torch:
  pip install --no-deps --target /tmp/spec-site speculators==0.9.0 openai loguru distro jiter \
      sniffio datasets multiprocess pandas python-dateutil pytz tzdata pyarrow dill xxhash hs-connectors
  PYTHONPATH=/tmp/spec-site /work/venv-gguf/bin/python tools/ref/make_dflash2_fixtures.py
Deterministic (CPU, one thread, fixed seeds).
"""
from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import dflash_ref  # noqa: E402
import fixture_common as fc  # noqa: E402
from make_dflash_fixtures import A2, load_target, target_taps  # noqa: E402

MIN_GAP = 5e-3
SAMPLE_T = 0.7

BASE = {
    "attention_bias": False, "attention_dropout": 0.0, "head_dim": 16, "hidden_act": "silu",
    "initializer_range": 0.02, "intermediate_size": 64, "max_position_embeddings": 512,
    "model_type": "qwen3", "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False, "vocab_size": 512,
}

DRAFTS = {
    # The published z-lab dialect (Qwen3.8-27B-DFlash2 shape, shrunk): architectures
    # DFlash2DraftModel, conv / selector keys in dflash_config, all layers sliding with top-level
    # is_causal false (symmetric windows), rope_parameters; plus output_multiplier and
    # final_logit_softcapping (vLLM's draft config keys) so both are exercised.
    "zlab_swa": dict(
        target="sharded", dialect="z-lab", layers=2, taps=[0, 1], block=8, seed=9101,
        conv_k=2, group=16, rank=16, top_k=4, multiplier=0.9, softcap=4.0,
        cfg={"layer_types": ["sliding_attention"] * 2, "sliding_window": 4, "use_sliding_window": True,
             "is_causal": False, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}},
    ),
    # The speculators dialect (DFlash2SpeculatorConfig as saved): transformer_layer_config, top-level
    # aux_hidden_state_layer_ids (= target layer + 1), conv / selector keys, full-attention layers
    # (bidirectional), a 3-tap kernel and group 8; no multiplier / softcap.
    "speculators_full": dict(
        target="untied_gqa1", dialect="speculators", layers=2, taps=[0, 1], block=16, seed=9201,
        conv_k=3, group=8, rank=8, top_k=6, multiplier=1.0, softcap=None,
        cfg={"layer_types": ["full_attention"] * 2, "rope_theta": 10000.0},
    ),
}


def ensure_speculators():
    try:
        from speculators.models.dflash2 import model_definitions as md  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"speculators 0.9 is not importable ({e}); see this file's docstring") from e
    return md


def layer_config(spec: dict, n_target_layers: int) -> dict:
    cfg = dict(BASE)
    cfg.update(spec["cfg"])
    cfg["num_hidden_layers"] = spec["layers"]
    cfg["hidden_size"] = spec.get("hidden", 64)
    cfg["num_target_layers"] = n_target_layers
    return cfg


def config_json(spec: dict, lcfg: dict, mask_id: int, verifier: str) -> dict:
    """config.json in the spec's dialect."""
    d2 = {"conv_kernel_size": spec["conv_k"], "conv_group_size": spec["group"],
          "selector_rank": spec["rank"], "selector_top_k": spec["top_k"]}
    if spec["multiplier"] != 1.0:
        d2["output_multiplier"] = spec["multiplier"]
    if spec["softcap"] is not None:
        d2["final_logit_softcapping"] = spec["softcap"]
    if spec["dialect"] == "z-lab":
        cfg = dict(lcfg)
        cfg["architectures"] = ["DFlash2DraftModel"]
        cfg["max_window_layers"] = spec["layers"]
        cfg["dflash_config"] = {"block_size": spec["block"], "mask_token_id": mask_id,
                                "target_layer_ids": list(spec["taps"]), **d2}
        cfg["dtype"] = "float32"
        cfg["transformers_version"] = "5.15.0"
        return dict(sorted(cfg.items()))
    tl = {k: v for k, v in lcfg.items() if k != "num_target_layers"}
    tl["architectures"] = ["Qwen3ForCausalLM"]
    cfg = {
        "architectures": ["DFlash2DraftModel"],
        "speculators_model_type": "dflash2",
        "speculators_version": importlib.metadata.version("speculators"),
        "transformer_layer_config": dict(sorted(tl.items())),
        "aux_hidden_state_layer_ids": [t + 1 for t in spec["taps"]],
        "mask_token_id": mask_id,
        "block_size": spec["block"],
        "draft_vocab_size": lcfg["vocab_size"],
        "sample_from_anchor": False,
        "sliding_window_non_causal": True,
        "speculators_config": {"algorithm": "dflash2", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy",
                                                     "speculative_tokens": spec["block"] - 1}],
                               "verifier": {"name_or_path": verifier, "architectures": ["Qwen3ForCausalLM"]}},
        **d2,
    }
    return cfg


class Drafter:
    """fc + hidden_norm + the package's DFlash2 decoder layers + final norm + its CandidateSelector."""

    def __init__(self, md, spec: dict, lcfg: dict, k_taps: int, target_hidden: int, seed: int):
        from transformers import Qwen3Config
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, Qwen3RotaryEmbedding
        self.spec = spec
        self.rcfg = dict(lcfg)
        tc = Qwen3Config(**{k: v for k, v in lcfg.items() if k not in ("num_target_layers", "is_causal")})
        tc._attn_implementation = "eager"
        H = tc.hidden_size
        self.layers = torch.nn.ModuleList([
            md.Qwen3DFlash2DecoderLayer(tc, i, block_size=spec["block"], conv_kernel_size=spec["conv_k"],
                                        conv_group_size=spec["group"]) for i in range(spec["layers"])])
        self.fc = torch.nn.Linear(k_taps * target_hidden, H, bias=False)
        self.hidden_norm = Qwen3RMSNorm(H, eps=tc.rms_norm_eps)
        self.norm = Qwen3RMSNorm(H, eps=tc.rms_norm_eps)
        self.selector = md.CandidateSelector(vocab_size=tc.vocab_size, hidden_size=H, rank=spec["rank"],
                                             top_k=spec["top_k"])
        self.rotary = Qwen3RotaryEmbedding(tc)
        self.layer_attn = [dflash_ref.resolve_layer_attention(self.rcfg, i) for i in range(spec["layers"])]
        # Random weights (the package initialises the convolutions as identities and the selector
        # at std 0.02: both are made strong enough here to change the drafts).
        g = torch.Generator().manual_seed(seed)
        for name, p in sorted(self.named_parameters()):
            r = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if "norm" in name:
                val = 1.0 + 0.1 * r
            elif name.endswith("base_kernel"):
                val = 0.5 * r
                val[:, 0] += 1.0  # near identity at tap 0, real mixing at the others
            elif "kernel_projection" in name:
                val = 0.1 * r
            elif "codebook" in name:
                val = 0.6 * r
            elif "hidden_projection" in name:
                val = 0.6 * r
            else:
                val = 0.15 * r
            with torch.no_grad():
                p.copy_(val.to(torch.float32))

    def named_parameters(self):
        mods = {"fc": self.fc, "hidden_norm": self.hidden_norm, "norm": self.norm,
                "candidate_selector": self.selector}
        for i, l in enumerate(self.layers):
            mods[f"layers.{i}"] = l
        for pre, m in mods.items():
            for n, p in m.named_parameters():
                yield f"{pre}.{n}", p

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.named_parameters()}

    def mask(self, i: int, S: int, start: int, B: int) -> torch.Tensor:
        """Additive [1, 1, B, S + B] mask: context positions 0..S-1, block start..start+B-1."""
        window, causal = self.layer_attn[i]
        qpos = torch.arange(start, start + B)
        kpos = torch.cat([torch.arange(S), qpos])
        d = qpos[:, None] - kpos[None, :]
        vis = torch.ones_like(d, dtype=torch.bool)
        if causal:
            vis &= d >= 0
        if window is not None:
            vis &= d <= window - 1
            if not causal:
                vis &= -d <= window - 1
        m = torch.zeros(d.shape).masked_fill(~vis, float("-inf"))
        return m[None, None]

    @torch.no_grad()
    def block_hidden(self, taps: torch.Tensor, block_embeds: torch.Tensor, start: int) -> torch.Tensor:
        """taps [S, K*H_t] of positions 0..S-1 (S == start), block [B, H] at start.. -> [B, H]."""
        S, B = taps.shape[0], block_embeds.shape[0]
        assert S == start
        c = self.hidden_norm(self.fc(taps[None]))
        pos = torch.cat([torch.arange(S), torch.arange(start, start + B)])[None]
        pe = self.rotary(c, pos)
        h = block_embeds[None]
        for i, layer in enumerate(self.layers):
            h = layer(target_hidden=c, hidden_states=h, attention_mask=self.mask(i, S, start, B),
                      position_ids=pos, position_embeddings=pe)
        return self.norm(h)[0]

    def transform(self, logits: torch.Tensor) -> torch.Tensor:
        x = logits.float() * self.spec["multiplier"]
        cap = self.spec["softcap"]
        return x if cap is None else torch.tanh(x / cap) * cap

    @torch.no_grad()
    def walk(self, hidden: torch.Tensor, raw_logits: torch.Tensor, anchor: int, temperature: float):
        """Greedy path over drafted rows (hidden [n, H], raw target-head logits [n, V]); per row the
        candidate ids, their scores given the greedy predecessor and q = softmax(score / T)."""
        unary = self.transform(raw_logits)
        cand = raw_logits.topk(self.spec["top_k"], dim=-1).indices  # == topk of unary (monotone)
        prev = anchor
        toks, scores, qs = [], [], []
        for j in range(hidden.shape[0]):
            s = self.selector.score_candidates(unary[j][None], hidden[j][None],
                                               torch.tensor([prev]), cand[j][None])[0]
            k = int(torch.argmax(s))
            prev = int(cand[j, k])
            toks.append(prev)
            scores.append(s)
            qs.append(torch.softmax(s / temperature, -1))
        return cand, torch.tensor(toks), torch.stack(scores), torch.stack(qs), unary


def write_draft(folder: Path, cfg: dict, weights: dict[str, torch.Tensor]) -> None:
    fc.fresh_dir(folder)
    fc.write_json(folder / "config.json", cfg)
    fc.save_safetensors({k: v.contiguous() for k, v in sorted(weights.items())}, folder / "model.safetensors")


def make_golden_fixture(md, tok, name: str, spec: dict) -> None:
    mask_id = fc.token_ids(tok)["<|MASK|>"]
    tdir = fc.FIXTURES / "qwen3" / spec["target"]
    target = load_target(tdir)
    from safetensors.torch import load_file
    tg = load_file(str(tdir / "golden.safetensors"))
    prompt, greedy = tg["prompt_ids"].long(), tg["greedy_ids"].long()
    n = prompt.numel()
    taps, tlogits = target_taps(target, prompt, spec["taps"])
    anchor = int(torch.argmax(tlogits[-1]))
    assert anchor == int(greedy[0])
    seq2 = torch.cat([prompt, greedy[:A2 + 1]])
    taps2, _ = target_taps(target, seq2, spec["taps"])
    assert float((taps2[:n] - taps).abs().max()) < 1e-5
    anchor2 = int(greedy[A2 + 1])
    E = target.model.embed_tokens.weight.detach()
    lm_w = target.lm_head.weight.detach()
    lcfg = layer_config(spec, target.config.num_hidden_layers)
    seed = spec["seed"]
    for _ in range(50):
        dr = Drafter(md, spec, lcfg, len(spec["taps"]), target.config.hidden_size, seed)
        cycles = []
        for (tp, start, anc) in ((taps, n, anchor), (taps2, n + A2 + 1, anchor2)):
            ids = torch.tensor([anc] + [mask_id] * (spec["block"] - 1))
            h = dr.block_hidden(tp, E[ids], start)
            raw = h[1:] @ lm_w.T
            cand, toks, scores, qs, unary = dr.walk(h[1:], raw, anc, SAMPLE_T)
            cycles.append(dict(ids=ids, h=h, raw=raw, cand=cand, toks=toks, scores=scores, q=qs,
                               unary=unary, start=start))
        top2 = torch.cat([s.topk(2).values for c in cycles for s in c["scores"]]).view(-1, 2)
        gap = float((top2[:, 0] - top2[:, 1]).min())
        # The selector must matter: some greedy pick differs from the unary argmax.
        differs = sum(int((c["toks"] != torch.argmax(c["raw"], -1)).sum()) for c in cycles)
        if gap > MIN_GAP and differs > 0:
            break
        print(f"  {name}: seed {seed} rejected (gap {gap:.2e}, selector changes {differs})")
        seed += 1
    else:
        raise RuntimeError(name)
    folder = fc.fresh_dir(fc.FIXTURES / "dflash2" / name)
    verifier = f"tests/fixtures/qwen3/{spec['target']}"
    write_draft(folder / "draft", config_json(spec, lcfg, mask_id, verifier), dr.state_dict())

    golden = {"prompt_ids": fc.i32(prompt), "taps": fc.f32(taps), "cycle2_taps": fc.f32(taps2[n:])}
    for ci, c in enumerate(cycles):
        p = f"c{ci + 1}_"
        golden.update({
            p + "start_pos": fc.i32([c["start"]]), p + "block_ids": fc.i32(c["ids"]),
            p + "block_hidden": fc.f32(c["h"]), p + "logits": fc.f32(c["raw"]),
            p + "unary": fc.f32(c["unary"]), p + "candidates": fc.i32(c["cand"]),
            p + "scores": fc.f32(c["scores"]), p + "q": fc.f32(c["q"]), p + "draft_ids": fc.i32(c["toks"]),
            p + "unary_argmax_ids": fc.i32(torch.argmax(c["raw"], -1)),
        })
    fc.save_safetensors(golden, folder / "golden.safetensors")
    meta = {
        "target": verifier,
        "draft": "draft",
        "dialect": spec["dialect"],
        "golden_reference": f"speculators {importlib.metadata.version('speculators')} "
                            "Qwen3DFlash2DecoderLayer + CandidateSelector (walk per vLLM #52816)",
        "seed": seed,
        "n_prompt": n,
        "accepted_in_cycle1": A2,
        "block_size": spec["block"],
        "mask_token_id": mask_id,
        "sample_temperature": SAMPLE_T,
        "min_selector_top2_gap": round(gap, 6),
        "selector_changed_picks": differs,
        "resolved_layers_[window,causal]": [list(x) for x in dr.layer_attn],
        "tensors": {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in golden.items()},
    }
    fc.write_json(folder / "meta.json", meta)
    print(f"  {name}: seed {seed}, gap {gap:.3e}, selector changed {differs} picks")


def make_qwen35_drafter(md) -> None:
    """Random z-lab-dialect DFlash2 drafter for tests/fixtures/qwen35/flat_untied (hidden 48)."""
    tcfg = fc.json.loads((fc.FIXTURES / "qwen35" / "flat_untied" / "config.json").read_text())
    tc = tcfg.get("text_config", tcfg)
    spec = dict(dialect="z-lab", layers=2, taps=[1, 3], block=16, hidden=tc["hidden_size"], conv_k=2, group=16,
                rank=16, top_k=4, multiplier=1.0, softcap=None,
                cfg={"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4,
                     "use_sliding_window": True, "rope_theta": 10000.0})
    lcfg = layer_config(spec, tc["num_hidden_layers"])
    dr = Drafter(md, spec, lcfg, len(spec["taps"]), tc["hidden_size"], 9301)
    folder = fc.fresh_dir(fc.FIXTURES / "dflash2" / "qwen35_flat")
    write_draft(folder / "draft", config_json(spec, lcfg, 511, "tests/fixtures/qwen35/flat_untied"), dr.state_dict())
    fc.write_json(folder / "meta.json", {"target": "tests/fixtures/qwen35/flat_untied", "draft": "draft",
                                         "dialect": "z-lab", "golden_reference": None, "seed": 9301})


# z-lab/Qwen3.8-27B-DFlash2 config.json as published (ECOSYSTEM-2026-12.md §1.2; the field values
# quoted verbatim in public loaders' tests): configs only, no weights.
QWEN38_DFLASH2 = {
    "architectures": ["DFlash2DraftModel"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": None, "is_causal": False,
    "dflash_config": {"block_size": 8, "conv_group_size": 16, "conv_kernel_size": 2, "mask_token_id": 248070,
                      "selector_rank": 256, "selector_top_k": 16, "target_layer_ids": [5, 19, 33, 47, 61]},
    "dtype": "bfloat16", "eos_token_id": 248044, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "initializer_range": 0.02, "intermediate_size": 17408, "layer_types": ["sliding_attention"] * 5,
    "max_position_embeddings": 262144, "max_window_layers": 5, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 5, "num_key_value_heads": 8, "num_target_layers": 64,
    "pad_token_id": 248044, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 10000000, "rope_type": "default"}, "sliding_window": 2048,
    "tie_word_embeddings": False, "transformers_version": "5.15.0", "use_cache": True,
    "use_sliding_window": True, "vocab_size": 248320,
}


def write_published_configs() -> None:
    folder = fc.FIXTURES / "configs" / "Qwen3.8-27B-DFlash2"
    folder.mkdir(parents=True, exist_ok=True)
    fc.write_json(folder / "config.json", QWEN38_DFLASH2)


def write_gguf_twin() -> None:
    """zlab_swa's drafter as a llama.cpp `dflash` GGUF (gguf-py) with the DFlash2 keys and tensor
    names of llama.cpp #27816 (dflash.conv_*/selector_*, blk.N.{attn,ffn}_conv_{base,proj},
    selector_{predecessor,successor,hidden}); the DFlash part as make_dflash_gguf_fixture.py."""
    import numpy as np
    from gguf import GGUFWriter
    from safetensors.numpy import load_file
    from make_dflash_gguf_fixture import gguf_name as dflash_gguf_name
    src = fc.FIXTURES / "dflash2" / "zlab_swa" / "draft"
    out = fc.FIXTURES / "dflash2" / "zlab_swa_gguf" / "draft.gguf"
    cfg = fc.json.loads((src / "config.json").read_text())
    dc = cfg["dflash_config"]
    tensors = load_file(str(src / "model.safetensors"))
    out.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(out), arch="dflash")
    for k, v in (("embedding_length", cfg["hidden_size"]), ("block_count", cfg["num_hidden_layers"]),
                 ("feed_forward_length", cfg["intermediate_size"]),
                 ("attention.head_count", cfg["num_attention_heads"]),
                 ("attention.head_count_kv", cfg["num_key_value_heads"]), ("attention.key_length", cfg["head_dim"]),
                 ("attention.value_length", cfg["head_dim"]), ("context_length", cfg["max_position_embeddings"]),
                 ("block_size", dc["block_size"]), ("attention.sliding_window", cfg["sliding_window"]),
                 ("conv_kernel_size", dc["conv_kernel_size"]), ("conv_group_size", dc["conv_group_size"]),
                 ("selector_rank", dc["selector_rank"]), ("selector_top_k", dc["selector_top_k"])):
        w.add_uint32(f"dflash.{k}", v)
    w.add_float32("dflash.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    w.add_float32("dflash.rope.freq_base", cfg["rope_parameters"]["rope_theta"])
    w.add_bool("dflash.attention.causal", bool(cfg["is_causal"]))
    w.add_array("dflash.attention.sliding_window_pattern",
                [t == "sliding_attention" for t in cfg["layer_types"]])
    w.add_array("dflash.target_layers", [t + 1 for t in dc["target_layer_ids"]])
    w.add_uint32("tokenizer.ggml.mask_token_id", dc["mask_token_id"])
    top = {"candidate_selector.predecessor_codebook": "selector_predecessor.weight",
           "candidate_selector.successor_codebook": "selector_successor.weight",
           "candidate_selector.hidden_projection.weight": "selector_hidden.weight"}
    conv = {"attention_conv.base_kernel": "attn_conv_base",
            "attention_conv.kernel_projection.weight": "attn_conv_proj.weight",
            "mlp_conv.base_kernel": "ffn_conv_base", "mlp_conv.kernel_projection.weight": "ffn_conv_proj.weight"}
    for name in sorted(tensors):
        parts = name.split(".", 2)
        if name in top:
            g = top[name]
        elif parts[0] == "layers" and parts[2] in conv:
            g = f"blk.{parts[1]}.{conv[parts[2]]}"
        else:
            g = dflash_gguf_name(name)
        w.add_tensor(g, np.ascontiguousarray(tensors[name].astype(np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"  {out.relative_to(fc.REPO)}: {out.stat().st_size} bytes")


def main() -> None:
    fc.setup_determinism()
    md = ensure_speculators()
    tok = fc.build_tokenizer()
    names = sys.argv[1:] or list(DRAFTS) + ["qwen35_flat", "configs", "gguf"]
    for name in names:
        if name == "gguf":
            write_gguf_twin()
        elif name == "configs":
            write_published_configs()
        elif name == "qwen35_flat":
            make_qwen35_drafter(md)
        else:
            make_golden_fixture(md, tok, name, DRAFTS[name])


if __name__ == "__main__":
    main()
