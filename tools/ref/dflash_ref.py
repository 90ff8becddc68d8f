"""A small, readable torch reference of the DFlash drafter forward (docs: DFLASH-SPEC §2.2-2.5, §3).

Independent of the z-lab `dflash` package (written from the spec); it covers every variant the C++
engine must support:
  * per-layer attention resolution (§3.1): layer_types / dflash_config.use_swa / swa_window_size /
    sliding_window, causality from top-level is_causal, then dflash_config.causal, then layer type;
  * sliding windows with HF semantics (the window of W keys includes the query's own position):
    causal q-k in [0, W-1]; non-causal (symmetrised) |q-k| <= W-1;
  * attention sinks (dflash_config.attention_sink_bias): extra unscaled logit s_h in the fp32
    softmax denominator, no value;
  * mask_embedding.pt override of the MASK token's embedding (drafter input only);
  * partial_rotary_factor: rotate the leading r = int(hd*factor) dims, NeoX pairs (i, i+r/2),
    inv_freq_i = base^(-2i/r);
  * attention_value_scale: multiplies V of context AND block (switch: apply_value_scale);
  * backbone_rotary_base: RoPE base for CONTEXT keys only; block Q/K use rope_theta
    (switch: apply_backbone_base);
  * rope_scaling yarn / default for the drafter's own RoPE;
  * an incremental context K/V cache (what an engine keeps between cycles).

All math in float32 (or float64 if the weights are float64). Tensors are unbatched: [T, ...].
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch


# ---------------------------------------------------------------------------------------------
# Config helpers
# ---------------------------------------------------------------------------------------------

def dflash_value(cfg: dict, name: str, default=None):
    """dflash_config first, then top level (DFLASH-SPEC §1.3)."""
    dc = cfg.get("dflash_config") or {}
    if name in dc and dc[name] is not None:
        return dc[name]
    v = cfg.get(name)
    return default if v is None else v


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    span = (num_target_layers - 3) - 1
    # Python round() = round-half-to-even, as in the reference.
    return [round(1 + (i * span) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def resolve_layer_attention(cfg: dict, i: int) -> tuple[int | None, bool]:
    """(sliding_window or None, causal) for draft layer i, per DFLASH-SPEC §3.1 (vLLM rules)."""
    dc = cfg.get("dflash_config") or {}
    layer_types = cfg.get("layer_types")
    use_swa = bool(dc.get("use_swa", False))
    if layer_types is not None and "sliding_attention" in layer_types:
        sliding = layer_types[i] == "sliding_attention"
    elif layer_types is not None:
        sliding = use_swa
    else:
        sliding = use_swa
    window = None
    if sliding:
        window = dc.get("swa_window_size") or cfg.get("sliding_window")
        if not window:
            raise ValueError(f"layer {i} is sliding but no swa_window_size / sliding_window")
        window = int(window)
    if cfg.get("is_causal") is not None:
        causal = bool(cfg["is_causal"])
    elif dc.get("causal") is not None:
        causal = bool(dc["causal"])
    elif layer_types is not None:
        causal = layer_types[i] == "sliding_attention"
    else:
        causal = False
    return window, causal


def rope_params(cfg: dict) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) from either the 4.x layout or transformers-5 rope_parameters."""
    rp = cfg.get("rope_parameters")
    if rp:
        theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        scaling = {k: v for k, v in rp.items() if k not in ("rope_theta", "partial_rotary_factor")}
        if scaling.get("rope_type", "default") == "default":
            scaling = None
        return theta, scaling
    theta = float(cfg.get("rope_theta", 10000.0))
    scaling = cfg.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type", "default")) == "default":
        scaling = None
    return theta, scaling


def inv_freq_and_scale(rot_dim: int, base: float, scaling: dict | None, max_pos: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (float32, [rot_dim/2]) and the cos/sin multiplier, HF conventions."""
    exps = torch.arange(0, rot_dim, 2, dtype=torch.int64).float() / rot_dim
    if not scaling:
        return 1.0 / (base ** exps), 1.0
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "yarn":
        raise NotImplementedError(f"rope_type {kind}")
    factor = float(scaling["factor"])
    orig = int(scaling.get("original_max_position_embeddings") or max_pos)
    att = scaling.get("attention_factor")
    if att is None:
        att = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def corr_dim(rot):
        return (rot_dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rot_dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(rot_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** exps
    extra = 1.0 / pos_freqs
    inter = 1.0 / (factor * pos_freqs)
    keep_extra = 1 - ramp
    return inter * (1 - keep_extra) + extra * keep_extra, float(att)


def rope(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor, att: float) -> torch.Tensor:
    """NeoX rotate-half RoPE on the leading r = 2*len(inv_freq) dims of x [T, heads, hd]."""
    r = 2 * inv_freq.numel()
    freqs = pos.to(torch.float32)[:, None] * inv_freq[None, :]        # [T, r/2]
    emb = torch.cat([freqs, freqs], -1)                               # [T, r]
    cos = (emb.cos() * att).to(x.dtype)[:, None, :]
    sin = (emb.sin() * att).to(x.dtype)[:, None, :]
    xr, xp = x[..., :r], x[..., r:]
    half = r // 2
    rot = torch.cat([-xr[..., half:], xr[..., :half]], -1)
    return torch.cat([xr * cos + rot * sin, xp], -1)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.to(torch.float32) if x.dtype != torch.float64 else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * y.to(x.dtype)


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

def load_draft(folder: str | Path):
    """(config dict, weights without any `model.` prefix, mask_embedding tensor or None)."""
    from safetensors.torch import load_file
    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    files = sorted(p for p in folder.glob("*.safetensors"))
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        for k, v in load_file(str(f)).items():
            if k.startswith("model."):
                k = k[len("model."):]
            weights[k] = v
    mask = None
    mp = folder / "mask_embedding.pt"
    if mp.exists():
        obj = torch.load(str(mp), weights_only=True)
        if isinstance(obj, dict):
            mid = obj.get("mask_token_id")
            if mid is not None and mid != dflash_value(cfg, "mask_token_id"):
                raise ValueError("mask_embedding.pt mask_token_id disagrees with config")
            obj = obj["embedding"]
        mask = obj.reshape(cfg["hidden_size"])
    return cfg, weights, mask


# ---------------------------------------------------------------------------------------------
# The drafter
# ---------------------------------------------------------------------------------------------

@dataclass
class LayerCache:
    k: torch.Tensor    # [S, n_kv, hd]   k_norm'ed + RoPE'd context keys
    v: torch.Tensor    # [S, n_kv, hd]   (value-scaled if enabled)
    pos: torch.Tensor  # [S] absolute positions


class DFlashRef:
    def __init__(self, cfg: dict, weights: dict[str, torch.Tensor], mask_embedding: torch.Tensor | None = None,
                 *, apply_value_scale: bool | None = None, apply_backbone_base: bool | None = None,
                 dtype: torch.dtype = torch.float32):
        self.cfg = cfg
        self.w = {k: v.to(dtype) for k, v in weights.items()}
        self.dtype = dtype
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or self.H // self.nh
        self.L = cfg["num_hidden_layers"]
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.mask_token_id = dflash_value(cfg, "mask_token_id")
        self.block_size = int(dflash_value(cfg, "block_size", 16))
        self.target_layer_ids = dflash_value(cfg, "target_layer_ids") or build_target_layer_ids(
            cfg["num_target_layers"], self.L)
        self.mask_embedding = None if mask_embedding is None else mask_embedding.to(dtype)
        self.sinks = bool(dflash_value(cfg, "attention_sink_bias", cfg.get("add_swa_attention_sink_bias", False)))
        vs = dflash_value(cfg, "attention_value_scale")
        self.value_scale = float(vs) if (vs is not None and apply_value_scale is not False) else 1.0
        theta, scaling = rope_params(cfg)
        prf = cfg.get("partial_rotary_factor")
        if prf is None and cfg.get("rope_parameters"):
            prf = cfg["rope_parameters"].get("partial_rotary_factor")
        prf = float(prf) if prf is not None else 1.0
        self.rot_dim = int(self.hd * prf)
        max_pos = int(cfg.get("max_position_embeddings", 4096))
        self.inv_freq, self.att = inv_freq_and_scale(self.rot_dim, theta, scaling, max_pos)
        bb = dflash_value(cfg, "backbone_rotary_base")
        if bb is not None and apply_backbone_base is not False:
            self.ctx_inv_freq, self.ctx_att = inv_freq_and_scale(self.rot_dim, float(bb), scaling, max_pos)
        else:
            self.ctx_inv_freq, self.ctx_att = self.inv_freq, self.att
        self.layer_attn = [resolve_layer_attention(cfg, i) for i in range(self.L)]
        self.embed_scale = float(dflash_value(cfg, "input_embedding_scale", 1.0))
        self.reset()

    # -- state ----------------------------------------------------------------------------
    def reset(self):
        self.cache: list[LayerCache | None] = [None] * self.L

    def cache_len(self) -> int:
        return 0 if self.cache[0] is None else int(self.cache[0].pos.numel())

    # -- pieces ---------------------------------------------------------------------------
    def lin(self, name: str, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.w[name + ".weight"].T
        b = self.w.get(name + ".bias")
        return y if b is None else y + b

    def context_features(self, taps: torch.Tensor) -> torch.Tensor:
        """taps [S, K*H_target] -> c [S, H] = hidden_norm(fc(taps))."""
        return rms_norm(self.lin("fc", taps.to(self.dtype)), self.w["hidden_norm.weight"], self.eps)

    def embed_block(self, block_ids: torch.Tensor, target_embed: torch.Tensor) -> torch.Tensor:
        e = target_embed.to(self.dtype)[block_ids.long()] * self.embed_scale
        if self.mask_embedding is not None:
            is_mask = (block_ids == self.mask_token_id)[:, None]
            e = torch.where(is_mask, self.mask_embedding[None, :].expand_as(e), e)
        return e

    def kv(self, i: int, x: torch.Tensor, pos: torch.Tensor, is_context: bool):
        p = f"layers.{i}.self_attn."
        T = x.shape[0]
        k = self.lin(p + "k_proj", x).view(T, self.nkv, self.hd)
        k = rms_norm(k, self.w[p + "k_norm.weight"], self.eps)
        if is_context:
            k = rope(k, pos, self.ctx_inv_freq, self.ctx_att)
        else:
            k = rope(k, pos, self.inv_freq, self.att)
        v = self.lin(p + "v_proj", x).view(T, self.nkv, -1) * self.value_scale
        return k, v

    def visible(self, i: int, qpos: torch.Tensor, kpos: torch.Tensor) -> torch.Tensor:
        window, causal = self.layer_attn[i]
        d = qpos[:, None] - kpos[None, :]           # q - k
        vis = torch.ones_like(d, dtype=torch.bool)
        if causal:
            vis &= d >= 0
        if window is not None:
            vis &= d <= window - 1
            if not causal:
                vis &= -d <= window - 1
        return vis

    def attention(self, i: int, q, k, v, qpos, kpos) -> torch.Tensor:
        """q [B,nh,hd], k [S+B,nkv,hd], v [S+B,nkv,vd] -> [B, nh*vd] (softmax in fp32)."""
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scale = self.hd ** -0.5
        logits = torch.einsum("qhd,khd->hqk", q, k) * scale             # [nh, B, S+B]
        ftype = torch.float64 if self.dtype == torch.float64 else torch.float32
        logits = logits.to(ftype)
        vis = self.visible(i, qpos, kpos)
        logits = logits.masked_fill(~vis[None], float("-inf"))
        if self.sinks:
            s = self.w[f"layers.{i}.self_attn.attention_sink_bias"].to(ftype)  # [nh], not scaled
            sink = s[:, None, None].expand(self.nh, logits.shape[1], 1)
            full = torch.cat([logits, sink], -1)
            probs = torch.softmax(full, -1)[..., :-1]
        else:
            probs = torch.softmax(logits, -1)
        out = torch.einsum("hqk,khd->qhd", probs.to(v.dtype), v)
        return out.reshape(q.shape[0], -1)

    # -- the forward ----------------------------------------------------------------------
    def forward(self, new_ctx_taps: torch.Tensor | None, ctx_start_pos: int, block_embeds: torch.Tensor,
                block_start_pos: int, update_cache: bool = True) -> torch.Tensor:
        """One draft call.

        new_ctx_taps [S_new, K*H] are the target taps of positions ctx_start_pos.. (must continue the
        cache: ctx_start_pos == cache_len()); block_embeds [B, H] sit at block_start_pos..+B-1.
        Context K/V are appended to the cache (kept across calls); block K/V are transient.
        Returns the final-normed block hidden states [B, H].
        """
        B = block_embeds.shape[0]
        bpos = torch.arange(block_start_pos, block_start_pos + B)
        if new_ctx_taps is not None and new_ctx_taps.shape[0] > 0:
            assert ctx_start_pos == self.cache_len(), (ctx_start_pos, self.cache_len())
            c = self.context_features(new_ctx_taps)
            cpos = torch.arange(ctx_start_pos, ctx_start_pos + c.shape[0])
        else:
            c, cpos = None, None
        h = block_embeds.to(self.dtype)
        new_cache = []
        for i in range(self.L):
            p = f"layers.{i}."
            a = rms_norm(h, self.w[p + "input_layernorm.weight"], self.eps)
            q = self.lin(p + "self_attn.q_proj", a).view(B, self.nh, self.hd)
            q = rms_norm(q, self.w[p + "self_attn.q_norm.weight"], self.eps)
            q = rope(q, bpos, self.inv_freq, self.att)
            kb, vb = self.kv(i, a, bpos, is_context=False)
            old = self.cache[i]
            ks, vs, ps = [], [], []
            if old is not None:
                ks.append(old.k); vs.append(old.v); ps.append(old.pos)
            if c is not None:
                kc, vc = self.kv(i, c, cpos, is_context=True)
                ks.append(kc); vs.append(vc); ps.append(cpos)
            ctx_k = torch.cat(ks, 0) if ks else kb[:0]
            ctx_v = torch.cat(vs, 0) if vs else vb[:0]
            ctx_p = torch.cat(ps, 0) if ps else bpos[:0]
            new_cache.append(LayerCache(ctx_k, ctx_v, ctx_p))
            K = torch.cat([ctx_k, kb], 0)
            V = torch.cat([ctx_v, vb], 0)
            kpos = torch.cat([ctx_p, bpos], 0)
            o = self.attention(i, q, K, V, bpos, kpos)
            h = h + self.lin(p + "self_attn.o_proj", o)
            m = rms_norm(h, self.w[p + "post_attention_layernorm.weight"], self.eps)
            gate = self.lin(p + "mlp.gate_proj", m)
            up = self.lin(p + "mlp.up_proj", m)
            h = h + self.lin(p + "mlp.down_proj", torch.nn.functional.silu(gate) * up)
        if update_cache:
            self.cache = new_cache
        return rms_norm(h, self.w["norm.weight"], self.eps)
