"""The DFlash drafter in the published z-lab layout, for training (DFLASH-SPEC §1.1-§2.4, §3).

  fc [H, K·H_t] over the concatenated taps -> hidden_norm        (context features c, per position)
  layers.{i}: input_layernorm, self_attn.{q,k,v,o}_proj, q_norm/k_norm (per head), post_attention_layernorm,
              mlp.{gate,up,down}_proj (SwiGLU), optional self_attn.attention_sink_bias [n_heads]
  norm                                                            (final, before the head)
Context K/V: every layer projects c with its own k_proj/v_proj (+ k_norm + RoPE), WITHOUT input_layernorm;
block K/V come from the block's normed hidden states. Keys = [context ; block].

Training form (many anchors per sequence in one pass): for a sequence of length L with anchors a_1..a_A,
the A blocks [x_a, MASK x (B-1)] at positions a..a+B-1 are laid side by side; block queries of anchor a see
the context positions p < a (and |q-p| < W with use_swa) and their own block bidirectionally, nothing else.

The token embedding and the head are the target's, frozen: `embed` holds the target table (already x the
family's embedding scale, e.g. sqrt(H) for Gemma) and `head` the rows of the target lm_head over the draft
vocabulary (all rows, or the K most frequent tokens with d2t mapping back).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DrafterConfig:
    hidden_size: int = 640
    intermediate_size: int = 2048
    num_hidden_layers: int = 1
    num_attention_heads: int = 4
    num_key_value_heads: int = 1
    head_dim: int = 256
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    block_size: int = 16
    target_layer_ids: list = field(default_factory=lambda: [1, 4, 8, 12, 15])
    target_hidden_size: int = 640
    num_target_layers: int = 18
    mask_token_id: int = 4
    use_swa: bool = False
    swa_window_size: int = 0
    attention_sink_bias: bool = False
    mask_embedding: bool = True     # a trained MASK vector (exported as mask_embedding.pt)
    vocab_size: int = 262144        # the target's
    draft_vocab_size: int = 0       # 0 = full vocabulary


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_cos_sin(pos: torch.Tensor, hd: int, theta: float):
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)  # [hd/2]
    ang = pos.float()[..., None] * inv                                      # [..., hd/2]
    ang = torch.cat([ang, ang], -1)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):  # NeoX / rotate-half; x [..., T, h, hd], cos/sin [..., T, hd]
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos[..., None, :] + rot * sin[..., None, :]


class Attention(nn.Module):
    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.c = c
        H, nh, nkv, hd = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(H, nh * hd, bias=False)
        self.k_proj = nn.Linear(H, nkv * hd, bias=False)
        self.v_proj = nn.Linear(H, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(hd, c.rms_norm_eps)
        if c.attention_sink_bias:
            self.attention_sink_bias = nn.Parameter(torch.zeros(nh))

    def kv(self, x, cos, sin):
        b, t, _ = x.shape
        c = self.c
        k = self.k_norm(self.k_proj(x).view(b, t, c.num_key_value_heads, c.head_dim))
        v = self.v_proj(x).view(b, t, c.num_key_value_heads, c.head_dim)
        return apply_rope(k, cos, sin), v

    def forward(self, a, ctx, cos_b, sin_b, cos_c, sin_c, allow):
        """a [b, Q, H] normed block rows; ctx [b, S, H] context features; allow [b, Q, S+Q] bool."""
        c = self.c
        b, q, _ = a.shape
        Q = apply_rope(self.q_norm(self.q_proj(a).view(b, q, c.num_attention_heads, c.head_dim)), cos_b, sin_b)
        kc, vc = self.kv(ctx, cos_c, sin_c)
        kb, vb = self.kv(a, cos_b, sin_b)
        K = torch.cat([kc, kb], 1)
        V = torch.cat([vc, vb], 1)
        rep = c.num_attention_heads // c.num_key_value_heads
        K = K.repeat_interleave(rep, 2) if rep > 1 else K
        V = V.repeat_interleave(rep, 2) if rep > 1 else V
        s = torch.einsum("bqhd,bkhd->bhqk", Q, K) * (c.head_dim ** -0.5)
        s = s.masked_fill(~allow[:, None], float("-inf"))
        if c.attention_sink_bias:
            sink = self.attention_sink_bias.view(1, -1, 1, 1).expand(b, -1, q, 1)
            p = torch.softmax(torch.cat([s, sink], -1).float(), -1)[..., :-1].to(V.dtype)
        else:
            p = torch.softmax(s.float(), -1).to(V.dtype)
        o = torch.einsum("bhqk,bkhd->bqhd", p, V).reshape(b, q, -1)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, h, ctx, rope, allow):
        h = h + self.self_attn(self.input_layernorm(h), ctx, *rope, allow)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDrafter(nn.Module):
    """Trainable part: fc, hidden_norm, layers, norm, [mask_embedding]. embed/head are frozen buffers."""

    def __init__(self, c: DrafterConfig, embed: torch.Tensor, head: torch.Tensor):
        super().__init__()
        self.c = c
        K = len(c.target_layer_ids)
        self.fc = nn.Linear(K * c.target_hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.register_buffer("embed", embed, persistent=False)  # [V, H] scaled target embedding
        self.register_buffer("head", head, persistent=False)    # [V_draft, H] target head rows
        if c.mask_embedding:
            # Zero, not the table row: a Gemma row is x sqrt(H) (norm ~26) and would dominate the block's
            # residual stream until Adam shrinks it (measured: val loss stuck near 6 for 150 steps).
            self.mask_embedding = nn.Parameter(torch.zeros(embed.shape[1]))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        # Start with logits of O(1): the final norm scales the unit-RMS rows by 1/|mean head row|.
        with torch.no_grad():
            self.norm.weight.fill_(1.0 / float(head.float().norm(dim=-1).mean().clamp(min=1e-6)))

    def context(self, taps):  # taps [b, S, K·H_t] -> [b, S, H]
        return self.hidden_norm(self.fc(taps))

    def block_embed(self, tokens):  # [b, Q] (MASK = mask_token_id)
        e = self.embed[tokens].float()
        if self.c.mask_embedding:
            m = (tokens == self.c.mask_token_id)[..., None]
            e = torch.where(m, self.mask_embedding.to(e.dtype), e)
        return e

    def forward(self, taps, tokens, ctx_pos, blk_pos, allow):
        """taps [b,S,K·H_t]; tokens/blk_pos [b,Q]; ctx_pos [b,S]; allow [b,Q,S+Q] -> normed block rows [b,Q,H]."""
        ctx = self.context(taps)
        rope = rope_cos_sin(blk_pos, self.c.head_dim, self.c.rope_theta) + \
            rope_cos_sin(ctx_pos, self.c.head_dim, self.c.rope_theta)
        h = self.block_embed(tokens)
        for layer in self.layers:
            h = layer(h, ctx, rope, allow)
        return self.norm(h)

    def logits(self, z):  # [..., H] -> [..., V_draft]
        return z @ self.head.t().to(z.dtype)


def block_mask(anchors: torch.Tensor, S: int, B: int, window: int = 0) -> torch.Tensor:
    """anchors [b, A] (−1 = unused slot) -> allow [b, A·B, S + A·B]: block of anchor a sees context p < a
    (and a+j−p < window with SWA) and its own B rows."""
    b, A = anchors.shape
    Q = A * B
    a = anchors.repeat_interleave(B, 1)                              # [b, Q]
    qpos = a + torch.arange(B).repeat(A)                             # [b, Q]
    p = torch.arange(S)
    ctx = p[None, None, :] < a[..., None]
    if window:
        ctx &= (qpos[..., None] - p[None, None, :]) < window
    blk_id = torch.arange(Q) // B
    own = blk_id[:, None] == blk_id[None, :]
    own = own[None].expand(b, Q, Q) & (a[..., None] >= 0)
    return torch.cat([ctx, own], -1)


def decay_weights(B: int, gamma: float) -> torch.Tensor:
    """Loss weight of block position k = 1..B−1 (k-th draft after the anchor): exp(−(k−1)/γ) (DFlash paper)."""
    k = torch.arange(1, B, dtype=torch.float32)
    return torch.exp(-(k - 1) / gamma)
