#include "model/blocks.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/weights.h"

namespace dfl {

AttnParams attn_params(const LayerSpec& s, const std::vector<float>& sinks) {
  AttnParams p;
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.d_qk = s.head_dim;
  p.d_v = s.v_head_dim;
  p.scale = s.attn_scale > 0 ? s.attn_scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.window = s.window;
  p.sinks = sinks.empty() ? nullptr : sinks.data();
  return p;
}

DecoderLayer load_dense_layer(const Checkpoint& ck, const std::string& p, const LayerSpec& s,
                              int32_t H, int32_t I, const LoadOptions& opts, ThreadPool* pool,
                              bool qk_norm) {
  DecoderLayer l;
  AttnWeights& a = l.attn;
  a.norm = load_vector(ck, p + "input_layernorm.weight", H);
  a.q = load_linear(ck, p + "self_attn.q_proj.weight", int64_t(s.n_heads) * s.head_dim, H);
  a.k = load_linear(ck, p + "self_attn.k_proj.weight", int64_t(s.n_kv_heads) * s.head_dim, H);
  a.v = load_linear(ck, p + "self_attn.v_proj.weight", int64_t(s.n_kv_heads) * s.v_head_dim, H);
  a.o = load_linear(ck, p + "self_attn.o_proj.weight", H, int64_t(s.n_heads) * s.v_head_dim);
  if (qk_norm) {
    a.q_norm = load_vector(ck, p + "self_attn.q_norm.weight", s.head_dim);
    a.k_norm = load_vector(ck, p + "self_attn.k_norm.weight", s.head_dim);
  }
  if (s.sinks) a.sinks = load_vector(ck, p + "self_attn.attention_sink_bias", s.n_heads);
  FfnWeights& f = l.ffn;
  f.norm = load_vector(ck, p + "post_attention_layernorm.weight", H);
  f.gate = load_linear(ck, p + "mlp.gate_proj.weight", I, H);
  f.up = load_linear(ck, p + "mlp.up_proj.weight", I, H);
  f.down = load_linear(ck, p + "mlp.down_proj.weight", H, I);
  convert_layer(l, opts, pool);
  return l;
}

void convert_layer(DecoderLayer& l, const LoadOptions& opts, ThreadPool* pool) {
  std::vector<WeightMatrix*> ms;
  AttnWeights& a = l.attn;
  for (WeightMatrix* m : {&a.q, &a.k, &a.v, &a.qkv, &a.o}) ms.push_back(m);
  GdnWeights& d = l.gdn;
  for (WeightMatrix* m : {&d.in_qkv, &d.in_z, &d.in_a, &d.in_b, &d.out}) ms.push_back(m);
  FfnWeights& f = l.ffn;
  if (f.kind == FfnKind::kMoE || f.kind == FfnKind::kGeGLUPlusMoE) {
    for (auto* v : {&f.moe.gate, &f.moe.up, &f.moe.down})
      for (auto& m : *v) ms.push_back(&m);
    for (WeightMatrix* m : {&f.sh_gate, &f.sh_up, &f.sh_down}) ms.push_back(m);
  }
  if (f.kind != FfnKind::kMoE)
    for (WeightMatrix* m : {&f.gate, &f.up, &f.down}) ms.push_back(m);
  // Reserve so the stored copies never move while WeightMatrix objects point into them.
  l.owned.q8.reserve(ms.size());
  l.owned.packed.reserve(ms.size());
  for (WeightMatrix* m : ms)
    if (m->data) convert_weight(*m, opts, l.owned, pool);
}

int64_t DecoderLayer::matrix_bytes(const ModelConfig& cfg) const {
  int64_t b = 0;
  for (const WeightMatrix* m : {&attn.q, &attn.k, &attn.v, &attn.qkv, &attn.o, &gdn.in_qkv,
                                &gdn.in_z, &gdn.in_a, &gdn.in_b, &gdn.out})
    if (m->data) b += weight_bytes(*m);
  if (ffn.kind == FfnKind::kMoE || ffn.kind == FfnKind::kGeGLUPlusMoE) {
    b += weight_bytes(ffn.moe.router) + int64_t(cfg.moe ? cfg.moe->n_experts_per_tok : 0) *
                                            ffn.moe.expert_bytes();
    for (const WeightMatrix* m : {&ffn.sh_gate, &ffn.sh_up, &ffn.sh_down})
      if (m->data) b += weight_bytes(*m);
  }
  if (ffn.kind != FfnKind::kMoE)
    b += weight_bytes(ffn.gate) + weight_bytes(ffn.up) + weight_bytes(ffn.down);
  return b;
}

void require_all_used(const Checkpoint& ck, const ModelConfig& cfg,
                      const std::vector<std::string>& ignore) {
  const auto leftover = ck.unused_names(ignore);
  DFL_CHECK(leftover.empty(), "unexpected tensor '", leftover.empty() ? "" : leftover[0], "' in '",
            cfg.dir, "' (", leftover.size(), " tensors not used by ", cfg.architecture, ")");
}

void OutputHead::embed_rows(const int32_t* tokens, int64_t n, float* out) const {
  for (int64_t i = 0; i < n; ++i)
    DFL_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "token id ", tokens[i],
              " is out of range for vocab_size ", vocab);
  rows_to_f32(embed, tokens, n, out);
}

void OutputHead::logits(const float* x_normed, int64_t n, float* out, ThreadPool& pool) const {
  ops::matmul(x_normed, n, lm_head, out, pool);
  if (final_softcap > 0) ops::softcap(out, n * int64_t(vocab), final_softcap, &pool);
}

void OutputHead::norm_logits(const float* x, int64_t n, float* out, std::vector<float>& tmp,
                             ThreadPool& pool) const {
  float* t = Scratch::ensure(tmp, size_t(n) * hidden);
  ops::rms_norm(x, final_norm.data(), n, hidden, eps, t, &pool);
  logits(t, n, out, pool);
}

void OutputHead::prepare_argmax(ThreadPool* pool) {
  // A soft-capped head picks through its logits (argmax), so it needs no screen.
  screen = final_softcap > 0 ? ops::ArgmaxScreen{} : ops::argmax_screen(lm_head, pool);
}

void OutputHead::argmax(const float* x_normed, int64_t n, int32_t* out, ThreadPool& pool) const {
  if (final_softcap <= 0) {
    ops::matmul_argmax(x_normed, n, lm_head, screen, out, pool);
    return;
  }
  thread_local std::vector<float> y;
  float* l = Scratch::ensure(y, size_t(n) * vocab);
  logits(x_normed, n, l, pool);
  ops::argmax_rows(l, n, vocab, out);
}

void OutputHead::norm_argmax(const float* x, int64_t n, int32_t* out, std::vector<float>& tmp,
                             ThreadPool& pool) const {
  float* t = Scratch::ensure(tmp, size_t(n) * hidden);
  ops::rms_norm(x, final_norm.data(), n, hidden, eps, t, &pool);
  argmax(t, n, out, pool);
}

void project_qkv(const AttnWeights& w, const LayerSpec& s, const float* a, int32_t n,
                 const float* cos, const float* sin, float eps, float* q_out, float* k_out,
                 float* v_out, Scratch& sc, ThreadPool& pool) {
  const int64_t nq = int64_t(s.n_heads) * s.head_dim, nk = int64_t(s.n_kv_heads) * s.head_dim,
                nv = int64_t(s.n_kv_heads) * s.v_head_dim;
  const int32_t n_rot = s.rope.n_rot;
  if (w.fused) {
    // T shards, each [Q_s; K_s; V_s]: shard j holds query heads [j·nh/T, (j+1)·nh/T) and kv
    // heads [j·nkv/T, (j+1)·nkv/T) — consistent with GQA (query head h reads kv head h/(nh/nkv)).
    const int64_t rows = nq + nk + nv, sh = w.q_s + w.k_s + w.v_s;
    float* t = Scratch::ensure(sc.t, size_t(n) * rows);
    ops::matmul(a, n, w.qkv, t, pool);  // [n, T·(q_s + k_s + v_s)]
    for (int32_t r = 0; r < n; ++r) {
      const float* src = t + size_t(r) * rows;
      for (int64_t j = 0; j < w.shards; ++j) {
        const float* p = src + j * sh;
        if (q_out) std::copy_n(p, w.q_s, q_out + size_t(r) * nq + j * w.q_s);
        std::copy_n(p + w.q_s, w.k_s, k_out + size_t(r) * nk + j * w.k_s);
        std::copy_n(p + w.q_s + w.k_s, w.v_s, v_out + size_t(r) * nv + j * w.v_s);
      }
    }
  } else if (w.out_gate) {
    const int64_t hd = s.head_dim;
    float* t = Scratch::ensure(sc.t, size_t(n) * 2 * nq);
    float* gate = Scratch::ensure(sc.gate, size_t(n) * nq);
    ops::matmul(a, n, w.q, t, pool);  // [n, nh·(hd | hd)]
    for (int64_t r = 0; r < n; ++r)
      for (int64_t h = 0; h < s.n_heads; ++h) {
        const float* src = t + size_t(r) * 2 * nq + h * 2 * hd;
        if (q_out) std::copy_n(src, hd, q_out + size_t(r) * nq + h * hd);
        std::copy_n(src + hd, hd, gate + size_t(r) * nq + h * hd);
      }
    ops::matmul(a, n, w.k, k_out, pool);
    ops::matmul(a, n, w.v, v_out, pool);
  } else {
    // q [n, nh·hd] (when asked), k [n, nkv·hd], v [n, nkv·vd] (unless k_eq_v): one input
    ops::MatmulOut outs[3];
    int n_outs = 0;
    if (q_out) outs[n_outs++] = {&w.q, q_out};
    outs[n_outs++] = {&w.k, k_out};
    if (!w.v_from_k) outs[n_outs++] = {&w.v, v_out};
    ops::matmul_same_input(a, n, outs, n_outs, pool);
    if (w.v_from_k) std::copy_n(k_out, size_t(n) * nk, v_out);  // k_eq_v (nv == nk): V before the k norm
  }
  if (q_out) {
    if (!w.q_norm.empty())
      ops::rms_norm(q_out, w.q_norm.data(), int64_t(n) * s.n_heads, s.head_dim, eps, q_out, &pool);
    ops::rope_neox(q_out, n, nq, s.n_heads, s.head_dim, n_rot, cos, sin, &pool);
  }
  if (!w.k_norm.empty())
    ops::rms_norm(k_out, w.k_norm.data(), int64_t(n) * s.n_kv_heads, s.head_dim, eps, k_out, &pool);
  ops::rope_neox(k_out, n, nk, s.n_kv_heads, s.head_dim, n_rot, cos, sin, &pool);
  if (!w.v_norm.empty())
    ops::rms_norm(v_out, w.v_norm.data(), int64_t(n) * s.n_kv_heads, s.v_head_dim, eps, v_out, &pool);
  if (w.value_scale != 1.0f)  // before the cache write (HF scales V before cache.update)
    for (int64_t i = 0, e = int64_t(n) * nv; i < e; ++i) v_out[i] *= w.value_scale;
}

void attention_sublayer(const AttnWeights& w, const LayerSpec& s, float* x, const StepPlan& plan,
                        int32_t H, float eps, KvPool& kv, int32_t il, Scratch& sc,
                        ThreadPool& pool, SublayerWrap* wrap) {
  const int32_t R = plan.n_rows();
  const int64_t nq = int64_t(s.n_heads) * s.head_dim, nk = int64_t(s.n_kv_heads) * s.head_dim,
                nv = int64_t(s.n_kv_heads) * s.v_head_dim, no = int64_t(s.n_heads) * s.v_head_dim;
  float* a = Scratch::ensure(sc.a, size_t(R) * H);
  float* q = Scratch::ensure(sc.q, size_t(R) * nq);
  float* k = Scratch::ensure(sc.k, size_t(R) * nk);
  float* v = Scratch::ensure(sc.v, size_t(R) * nv);
  float* o = Scratch::ensure(sc.o, size_t(R) * no);
  ops::rms_norm(x, w.norm.data(), R, H, eps, a, &pool);
  if (wrap) wrap->input(a, R);
  project_qkv(w, s, a, R, plan.cos(w.rope), plan.sin(w.rope), eps, q, k, v, sc, pool);
  for (const PlanSegment& g : plan.segments()) {
    kv.write(g.seq, il, g.pos0, g.n, k + size_t(g.row0) * nk, v + size_t(g.row0) * nv);
    const KvPages view = kv.view(g.seq, il, sc.view);
    ops::attention(q + size_t(g.row0) * nq, plan.positions() + g.row0, g.n, view, w.params,
                   o + size_t(g.row0) * no, pool);
  }
  if (w.out_gate) {  // o ⊙ σ(gate), before the output projection (v_head_dim == head_dim)
    const float* gate = sc.gate.data();
    for (int64_t i = 0, e = int64_t(R) * no; i < e; ++i) o[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
  }
  ops::matmul(o, R, w.o, a, pool);  // [R, H]
  if (!w.post_norm.empty()) ops::rms_norm(a, w.post_norm.data(), R, H, eps, a, &pool);
  if (wrap) wrap->output(a, R);
  ops::add_inplace(x, a, int64_t(R) * H, &pool);
}

void ffn_sublayer(const FfnWeights& w, const ModelConfig& cfg, float* x, int32_t R, Scratch& sc,
                  ThreadPool& pool, SublayerWrap* wrap) {
  const int32_t H = cfg.hidden_size;
  const float eps = cfg.rms_norm_eps;
  float* a = Scratch::ensure(sc.a, size_t(R) * H);
  float* y = Scratch::ensure(sc.y, size_t(R) * H);
  ops::rms_norm(x, w.norm.data(), R, H, eps, a, &pool);
  if (wrap) wrap->input(a, R);
  if (w.kind == FfnKind::kMoE) {
    moe_forward(w.moe, *cfg.moe, a, R, H, y, sc.moe, pool);
    if (w.sh_gate.data) {
      const int64_t I = w.sh_gate.n_out;
      float* g = Scratch::ensure(sc.g, size_t(R) * I);
      float* u = Scratch::ensure(sc.u, size_t(R) * I);
      float* t = Scratch::ensure(sc.t, size_t(R) * H);
      ops::matmul(a, R, w.sh_gate, g, pool);
      ops::matmul(a, R, w.sh_up, u, pool);
      ops::silu_mul(g, u, int64_t(R) * I, g, &pool);
      ops::matmul(g, R, w.sh_down, t, pool);  // [R, H]
      for (int32_t r = 0; r < R; ++r) {
        const float* ar = a + size_t(r) * H;
        float dot = 0.0f;
        for (int32_t c = 0; c < H; ++c) dot += ar[c] * w.sh_gate_w[c];
        const float sg = 1.0f / (1.0f + std::exp(-dot));
        float* yr = y + size_t(r) * H;
        const float* tr = t + size_t(r) * H;
        for (int32_t c = 0; c < H; ++c) yr[c] += sg * tr[c];
      }
    }
  } else if (w.kind == FfnKind::kGeGLUPlusMoE) {
    // y = post_norm_1(GeGLU(a)) + post_norm_2(MoE(norm_2(x)) routed on router_norm(x)).
    const int64_t I = w.gate.n_out;
    float* g = Scratch::ensure(sc.g, size_t(R) * I);
    float* u = Scratch::ensure(sc.u, size_t(R) * I);
    float* e = Scratch::ensure(sc.e, size_t(R) * H);
    float* r = Scratch::ensure(sc.r, size_t(R) * H);
    ops::matmul(a, R, w.gate, g, pool);
    ops::matmul(a, R, w.up, u, pool);
    ops::gelu_tanh_mul(g, u, int64_t(R) * I, g, &pool);
    ops::matmul(g, R, w.down, y, pool);  // [R, H]
    ops::rms_norm(y, w.post_norm_1.data(), R, H, eps, y, &pool);
    ops::rms_norm(x, w.router_norm.data(), R, H, eps, r, &pool);
    ops::rms_norm(x, w.norm_2.data(), R, H, eps, a, &pool);
    moe_forward(w.moe, *cfg.moe, a, R, H, e, sc.moe, pool, nullptr, r);
    ops::rms_norm(e, w.post_norm_2.data(), R, H, eps, e, &pool);
    ops::add_inplace(y, e, int64_t(R) * H, &pool);
  } else {  // gated: act(gate(a)) ⊙ up(a) → down
    const int64_t I = w.gate.n_out;
    float* g = Scratch::ensure(sc.g, size_t(R) * I);
    float* u = Scratch::ensure(sc.u, size_t(R) * I);
    const ops::MatmulOut gate_up[2] = {{&w.gate, g}, {&w.up, u}};  // [R, I] each
    ops::matmul_same_input(a, R, gate_up, 2, pool);
    if (w.kind == FfnKind::kGeGLU)
      ops::gelu_tanh_mul(g, u, int64_t(R) * I, g, &pool);
    else
      ops::silu_mul(g, u, int64_t(R) * I, g, &pool);
    ops::matmul(g, R, w.down, y, pool);  // [R, H]
  }
  if (!w.post_norm.empty()) ops::rms_norm(y, w.post_norm.data(), R, H, eps, y, &pool);
  if (wrap) wrap->output(y, R);
  ops::add_inplace(x, y, int64_t(R) * H, &pool);
}

}  // namespace dfl
