#include "model/gdn.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/blocks.h"
#include "model/weights.h"

namespace dfl {

namespace {

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }
inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }  // torch β=1

// The recurrence over n tokens of one sequence and one layer.
//   qkv [n, C] (row stride sq; pre-conv), a, b [n, Hv] (row stride sab; raw projections)
//   conv_in [C, K-1] → conv_out (may alias);  s_in [Hv, dk, dv] → s_out (may alias)
//   o [n, Hv·dv] (or null: replay)
// Every token runs the same code whatever n is (the bit-exactness of rollback rests on it).
void scan(const GdnWeights& w, const GdnSpec& g, const float* qkv, int64_t sq, const float* a,
          const float* b, int64_t sab, int32_t n, const float* conv_in, float* conv_out,
          const float* s_in, float* s_out, float* o, std::vector<float>& cbuf, ThreadPool& pool) {
  const int32_t C = g.conv_dim(), K = g.conv_kernel, Km = K - 1;
  const int32_t Hk = g.n_k_heads, Hv = g.n_v_heads, dk = g.d_k, dv = g.d_v;
  const int32_t kd = g.key_dim();
  // 1. conv + silu, per channel, token by token over (state ++ rows); then l2norm q/k per token.
  float* y = Scratch::ensure(cbuf, size_t(n) * C);
  // Channels are independent: split over the pool (each channel's arithmetic is the same).
  pool.parallel_for(C, [&](int64_t c0, int64_t c1, int) {
    for (int64_t c = c0; c < c1; ++c) {
      float hist[16];
      DFL_ASSERT(Km <= 16);
      std::copy_n(conv_in + size_t(c) * Km, Km, hist);
      const float* wc = w.conv.data() + size_t(c) * K;
      for (int32_t t = 0; t < n; ++t) {
        const float xt = qkv[size_t(t) * sq + c];
        float acc = 0.0f;
        for (int32_t j = 0; j < Km; ++j) acc += wc[j] * hist[j];
        acc += wc[Km] * xt;
        y[size_t(t) * C + c] = silu(acc);
        for (int32_t j = 0; j + 1 < Km; ++j) hist[j] = hist[j + 1];
        if (Km > 0) hist[Km - 1] = xt;
      }
      std::copy_n(hist, Km, conv_out + size_t(c) * Km);
    }
  });
  const float qscale = 1.0f / std::sqrt(float(dk));
  for (int32_t t = 0; t < n; ++t) {
    float* r = y + size_t(t) * C;
    for (int32_t h = 0; h < 2 * Hk; ++h) {  // q heads then k heads
      float* v = r + size_t(h) * dk;
      float ss = 0.0f;
      for (int32_t i = 0; i < dk; ++i) ss += v[i] * v[i];
      const float inv = 1.0f / std::sqrt(ss + 1e-6f);
      for (int32_t i = 0; i < dk; ++i) v[i] *= inv;
      if (h < Hk)
        for (int32_t i = 0; i < dk; ++i) v[i] *= qscale;
    }
  }
  // 2. the gated delta rule, value heads in parallel (each head's state is its own).
  const int32_t rep = Hv / Hk;
  const size_t hs = size_t(dk) * dv;
  pool.parallel_for(Hv, [&](int64_t j0, int64_t j1, int) {
    for (int64_t j = j0; j < j1; ++j) {
      float* S = s_out + j * hs;
      const float* src = s_in + j * hs;
      const int32_t kh = int32_t(j) / rep;
      for (int32_t t = 0; t < n; ++t) {
        const float* r = y + size_t(t) * C;
        const float* q = r + size_t(kh) * dk;
        const float* k = r + kd + size_t(kh) * dk;
        const float* v = r + 2 * kd + size_t(j) * dv;
        const float beta = sigmoid(b[size_t(t) * sab + j]);
        const float decay = std::exp(w.neg_a[j] * softplus(a[size_t(t) * sab + j] + w.dt_bias[j]));
        ops::delta_rule_step(src, S, k, q, v, decay, beta, dk, dv,
                             o ? o + size_t(t) * Hv * dv + size_t(j) * dv : nullptr);
        src = S;
      }
      if (n == 0 && S != src) std::copy_n(src, hs, S);
    }
  });
}

}  // namespace

GdnWeights load_gdn(const Checkpoint& ck, const std::string& p, const GdnSpec& g, int32_t H) {
  GdnWeights w;
  const int32_t C = g.conv_dim(), Hv = g.n_v_heads;
  const std::string q = p + "linear_attn.";
  w.norm = load_norm(ck, p + "input_layernorm.weight", H, NormStyle::kZeroCentred);
  w.in_qkv = load_linear(ck, q + "in_proj_qkv.weight", C, H);
  w.in_z = load_linear(ck, q + "in_proj_z.weight", g.value_dim(), H);
  w.in_a = load_linear(ck, q + "in_proj_a.weight", Hv, H);
  w.in_b = load_linear(ck, q + "in_proj_b.weight", Hv, H);
  w.conv = load_f32(ck, q + "conv1d.weight", {C, 1, g.conv_kernel});
  const std::vector<float> a_log = load_vector(ck, q + "A_log", Hv);
  w.neg_a.resize(Hv);
  for (int32_t j = 0; j < Hv; ++j) w.neg_a[j] = -std::exp(a_log[j]);
  w.dt_bias = load_vector(ck, q + "dt_bias", Hv);
  w.out_norm = load_norm(ck, q + "norm.weight", g.d_v, NormStyle::kPlain);
  w.out = load_linear(ck, q + "out_proj.weight", H, g.value_dim());
  return w;
}

int32_t n_recurrent_layers(const ModelConfig& cfg) {
  int32_t n = 0;
  for (const auto& l : cfg.layers) n += l.mixer == MixerKind::kGatedDeltaNet;
  return n;
}

RecurrentSpec recurrent_spec(const ModelConfig& cfg) {
  RecurrentSpec s;
  if (!cfg.gdn) return s;
  const GdnSpec& g = *cfg.gdn;
  for (const auto& l : cfg.layers) s.n_layers += l.mixer == MixerKind::kGatedDeltaNet;
  s.conv_dim = g.conv_dim();
  s.conv_keep = g.conv_kernel - 1;
  s.n_v_heads = g.n_v_heads;
  s.d_k = g.d_k;
  s.d_v = g.d_v;
  s.row_width = g.conv_dim() + 2 * g.n_v_heads;
  return s;
}

void gdn_sublayer(const GdnWeights& w, const GdnSpec& g, float* x, const StepPlan& plan,
                  int32_t H, float eps, RecurrentState& st, GdnScratch& sc, ThreadPool& pool) {
  const int32_t R = plan.n_rows();
  const int32_t C = g.conv_dim(), Hv = g.n_v_heads, VD = g.value_dim();
  const int32_t L = w.layer, RW = st.spec().row_width;
  float* a = Scratch::ensure(sc.a, size_t(R) * H);
  float* qkv = Scratch::ensure(sc.qkv, size_t(R) * C);
  float* z = Scratch::ensure(sc.z, size_t(R) * VD);
  float* ga = Scratch::ensure(sc.ga, size_t(R) * Hv);
  float* gb = Scratch::ensure(sc.gb, size_t(R) * Hv);
  float* o = Scratch::ensure(sc.o, size_t(R) * VD);
  ops::rms_norm(x, w.norm.data(), R, H, eps, a, &pool);
  ops::matmul(a, R, w.in_qkv, qkv, pool);  // [R, C]
  ops::matmul(a, R, w.in_z, z, pool);      // [R, Hv·dv]
  ops::matmul(a, R, w.in_a, ga, pool);     // [R, Hv]
  ops::matmul(a, R, w.in_b, gb, pool);     // [R, Hv]
  for (const PlanSegment& s : plan.segments()) {
    const size_t r0 = size_t(s.row0);
    if (st.keeps_rows(s.seq)) {
      float* rows = st.rows(s.seq, L);
      for (int32_t t = 0; t < s.n; ++t) {
        float* d = rows + size_t(t) * RW;
        std::copy_n(qkv + (r0 + t) * C, C, d);
        std::copy_n(ga + (r0 + t) * Hv, Hv, d + C);
        std::copy_n(gb + (r0 + t) * Hv, Hv, d + C + Hv);
      }
    }
    scan(w, g, qkv + r0 * C, C, ga + r0 * Hv, gb + r0 * Hv, Hv, s.n, st.conv_in(s.seq, L),
         st.conv_out(s.seq, L), st.ssm_in(s.seq, L), st.ssm_out(s.seq, L), o + r0 * VD, sc.conv,
         pool);
  }
  // Gated RMSNorm per value head: (w ⊙ n(o_j)) · silu(z_j), then the out projection.
  ops::rms_norm(o, w.out_norm.data(), int64_t(R) * Hv, g.d_v, eps, o, &pool);
  ops::silu_mul(z, o, int64_t(R) * VD, z, &pool);
  ops::matmul(z, R, w.out, a, pool);  // [R, H]
  ops::add_inplace(x, a, int64_t(R) * H, &pool);
}

void gdn_replay(const GdnWeights& w, const GdnSpec& g, RecurrentState& st, int32_t seq,
                int32_t k, GdnScratch& sc, ThreadPool& pool) {
  if (k <= 0) return;
  const int32_t C = g.conv_dim(), Hv = g.n_v_heads, L = w.layer, RW = st.spec().row_width;
  const float* rows = st.rows(seq, L);
  float* conv = st.pre_conv(seq, L);
  float* ssm = st.pre_ssm(seq, L);
  scan(w, g, rows, RW, rows + C, rows + C + Hv, RW, k, conv, conv, ssm, ssm, nullptr, sc.conv,
       pool);
}

}  // namespace dfl
