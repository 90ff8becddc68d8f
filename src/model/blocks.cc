#include "model/blocks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/weights.h"

namespace dfl {

DenseLayer load_dense_layer(const Checkpoint& ck, const std::string& p, const LayerSpec& s,
                            int32_t H, int32_t I, const LoadOptions& opts, ThreadPool* pool) {
  DenseLayer w;
  w.in_norm = load_vector(ck, p + "input_layernorm.weight", H);
  w.post_norm = load_vector(ck, p + "post_attention_layernorm.weight", H);
  w.q = load_linear(ck, p + "self_attn.q_proj.weight", int64_t(s.n_heads) * s.head_dim, H);
  w.k = load_linear(ck, p + "self_attn.k_proj.weight", int64_t(s.n_kv_heads) * s.head_dim, H);
  w.v = load_linear(ck, p + "self_attn.v_proj.weight", int64_t(s.n_kv_heads) * s.v_head_dim, H);
  w.o = load_linear(ck, p + "self_attn.o_proj.weight", H, int64_t(s.n_heads) * s.v_head_dim);
  w.q_norm = load_vector(ck, p + "self_attn.q_norm.weight", s.head_dim);
  w.k_norm = load_vector(ck, p + "self_attn.k_norm.weight", s.head_dim);
  if (s.sinks) w.sinks = load_vector(ck, p + "self_attn.attention_sink_bias", s.n_heads);
  w.gate = load_linear(ck, p + "mlp.gate_proj.weight", I, H);
  w.up = load_linear(ck, p + "mlp.up_proj.weight", I, H);
  w.down = load_linear(ck, p + "mlp.down_proj.weight", H, I);
  w.owned.q8.reserve(7);
  w.owned.packed.reserve(7);
  for (WeightMatrix* m : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down})
    convert_weight(*m, opts, w.owned, pool);
  return w;
}

int64_t DenseLayer::matrix_bytes() const {
  return weight_bytes(q) + weight_bytes(k) + weight_bytes(v) + weight_bytes(o) +
         weight_bytes(gate) + weight_bytes(up) + weight_bytes(down);
}

void begin_forward(const ForwardArgs& a, const KvCache& kv, int32_t n_layers, int32_t hidden,
                   ForwardOut& out) {
  DFL_CHECK(a.n > 0, "empty forward pass");
  DFL_CHECK(a.pos0 == kv.length(a.seq), "forward: pos0 ", a.pos0, " != cached length ",
            kv.length(a.seq));
  DFL_CHECK(a.pos0 + a.n <= kv.max_context(), "context overflow: ", a.pos0 + a.n,
            " tokens exceed the context limit of ", kv.max_context());
  const size_t n_aux = a.aux ? a.aux->size() : 0;
  if (a.aux)
    for (int32_t idx : *a.aux)
      DFL_CHECK(idx >= 0 && idx <= n_layers, "aux hidden-state index ", idx,
                " is out of range [0, ", n_layers, "]");
  out.aux.assign(size_t(a.n) * n_aux * hidden, 0.0f);
}

void capture_aux(const ForwardArgs& a, int32_t index, const float* x, int32_t row0, int32_t n,
                 int32_t H, ForwardOut& out) {
  if (!a.aux) return;
  const size_t n_aux = a.aux->size();
  for (size_t j = 0; j < n_aux; ++j) {
    if ((*a.aux)[j] != index) continue;
    for (int32_t t = 0; t < n; ++t)
      std::copy_n(x + size_t(t) * H, H, out.aux.data() + ((size_t(row0) + t) * n_aux + j) * H);
  }
}

void require_all_used(const Checkpoint& ck, const ModelConfig& cfg,
                      const std::vector<std::string>& ignore) {
  const auto leftover = ck.unused_names(ignore);
  DFL_CHECK(leftover.empty(), "unexpected tensor '", leftover.empty() ? "" : leftover[0], "' in '",
            cfg.dir, "' (", leftover.size(), " tensors not used by ", cfg.architecture, ")");
}

AttnParams attn_params(const LayerSpec& s, const std::vector<float>& sinks) {
  AttnParams p;
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.d_qk = s.head_dim;
  p.d_v = s.v_head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.window = s.window;
  p.sinks = sinks.empty() ? nullptr : sinks.data();
  return p;
}

void OutputHead::embed_rows(const int32_t* tokens, int64_t n, float* out) const {
  for (int64_t i = 0; i < n; ++i)
    DFL_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "token id ", tokens[i],
              " is out of range for vocab_size ", vocab);
  rows_to_f32(embed, tokens, n, out);
}

void OutputHead::logits(const float* x_normed, int64_t n, float* out, ThreadPool& pool) const {
  ops::matmul(x_normed, n, lm_head, out, pool);
}

void OutputHead::norm_logits(const float* x, int64_t n, float* out, std::vector<float>& tmp,
                             ThreadPool& pool) const {
  if (tmp.size() < size_t(n) * hidden) tmp.resize(size_t(n) * hidden);
  ops::rms_norm(x, final_norm.data(), n, hidden, eps, tmp.data());
  logits(tmp.data(), n, out, pool);
}

void project_qkv(const DenseLayer& w, const LayerSpec& s, const RopeTable& rope, const float* a,
                 int32_t n, const int32_t* pos, float eps, float value_scale, float* q_out,
                 float* k_out, float* v_out, Scratch& sc, ThreadPool& pool) {
  const int32_t half = rope.n_rot() / 2;
  sc.ensure(sc.cos, size_t(n) * half);
  sc.ensure(sc.sin, size_t(n) * half);
  rope.fill(pos, n, sc.cos.data(), sc.sin.data());
  if (q_out) {
    ops::matmul(a, n, w.q, q_out, pool);                    // [n, nh*hd]
    ops::rms_norm(q_out, w.q_norm.data(), int64_t(n) * s.n_heads, s.head_dim, eps, q_out, &pool);
    ops::rope_neox(q_out, n, int64_t(s.n_heads) * s.head_dim, s.n_heads, s.head_dim, rope.n_rot(),
                   sc.cos.data(), sc.sin.data(), &pool);
  }
  ops::matmul(a, n, w.k, k_out, pool);                      // [n, nkv*hd]
  ops::rms_norm(k_out, w.k_norm.data(), int64_t(n) * s.n_kv_heads, s.head_dim, eps, k_out, &pool);
  ops::rope_neox(k_out, n, int64_t(s.n_kv_heads) * s.head_dim, s.n_kv_heads, s.head_dim,
                 rope.n_rot(), sc.cos.data(), sc.sin.data(), &pool);
  ops::matmul(a, n, w.v, v_out, pool);                      // [n, nkv*vd]
  if (value_scale != 1.0f) {
    const int64_t nv = int64_t(n) * s.n_kv_heads * s.v_head_dim;
    for (int64_t i = 0; i < nv; ++i) v_out[i] *= value_scale;
  }
}

void attention_block(const DenseLayer& w, const LayerSpec& s, const RopeTable& rope, float* x,
                     int32_t n, int32_t pos0, int32_t H, float eps, float value_scale,
                     KvCache& kv, int32_t seq, int32_t il, Scratch& sc, ThreadPool& pool) {
  const size_t nq = size_t(n) * s.n_heads * s.head_dim;
  const size_t nk = size_t(n) * s.n_kv_heads * s.head_dim;
  const size_t nv = size_t(n) * s.n_kv_heads * s.v_head_dim;
  sc.ensure(sc.a, size_t(n) * H);
  sc.ensure(sc.q, nq);
  sc.ensure(sc.k, nk);
  sc.ensure(sc.v, nv);
  sc.ensure(sc.o, size_t(n) * s.n_heads * s.v_head_dim);
  const int32_t* pos = sc.positions(pos0, n);

  ops::rms_norm(x, w.in_norm.data(), n, H, eps, sc.a.data(), &pool);
  project_qkv(w, s, rope, sc.a.data(), n, pos, eps, value_scale, sc.q.data(), sc.k.data(),
              sc.v.data(), sc, pool);
  kv.write(seq, il, pos0, n, sc.k.data(), sc.v.data());

  const AttnParams p = attn_params(s, w.sinks);
  ops::attention(sc.q.data(), pos, n, kv.k(seq, il), kv.v(seq, il), kv.pos(seq, il),
                 kv.n_slots(seq, il), p, sc.o.data(), pool);
  sc.ensure(sc.a, size_t(n) * H);
  ops::matmul(sc.o.data(), n, w.o, sc.a.data(), pool);     // [n, H]
  ops::add_inplace(x, sc.a.data(), int64_t(n) * H, &pool);
}

void mlp_block(const DenseLayer& w, float* x, int32_t n, int32_t H, int32_t I, float eps,
               Scratch& sc, ThreadPool& pool) {
  sc.ensure(sc.a, size_t(n) * H);
  sc.ensure(sc.g, size_t(n) * I);
  sc.ensure(sc.u, size_t(n) * I);
  ops::rms_norm(x, w.post_norm.data(), n, H, eps, sc.a.data(), &pool);
  ops::matmul(sc.a.data(), n, w.gate, sc.g.data(), pool);  // [n, I]
  ops::matmul(sc.a.data(), n, w.up, sc.u.data(), pool);    // [n, I]
  ops::silu_mul(sc.g.data(), sc.u.data(), int64_t(n) * I, sc.g.data(), &pool);
  ops::matmul(sc.g.data(), n, w.down, sc.a.data(), pool);  // [n, H]
  ops::add_inplace(x, sc.a.data(), int64_t(n) * H, &pool);
}

}  // namespace dfl
