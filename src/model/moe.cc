#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/weights.h"

namespace dfl {

int64_t MoEWeights::expert_bytes() const {
  return gate.empty() ? 0 : weight_bytes(gate[0]) + weight_bytes(up[0]) + weight_bytes(down[0]);
}

void load_router_f32(const Checkpoint& ck, const std::string& name, int32_t E, int32_t H,
                     MoEWeights& m) {
  // The router is computed in fp32 whatever it is stored in (vLLM/HF keep it fp32).
  const TensorInfo& r = ck.require(name, kFloatWeights, {E, H});
  m.router_f32.resize(size_t(E) * H);
  WeightMatrix raw;
  raw.dtype = r.dtype;
  raw.n_out = E;
  raw.n_in = H;
  raw.data = r.data;
  std::vector<int32_t> all(E);
  std::iota(all.begin(), all.end(), 0);
  rows_to_f32(raw, all.data(), E, m.router_f32.data());
  m.router.dtype = DType::kF32;
  m.router.n_out = E;
  m.router.n_in = H;
  m.router.data = m.router_f32.data();
}

void load_fused_experts(const Checkpoint& ck, const std::string& gate_up, const std::string& down,
                        int32_t E, int32_t I, int32_t H, MoEWeights& m) {
  // A GGUF checkpoint presents 3-D tensors as matrices [rows, cols]: [E·2I, H] and [E·H, I].
  const TensorInfo* probe = ck.find(gate_up);
  const bool flat = probe && probe->shape.size() == 2;
  const TensorInfo& gu = ck.require(gate_up, kFloatOrBlockWeights,
                                    flat ? std::vector<int64_t>{int64_t(E) * 2 * I, H}
                                         : std::vector<int64_t>{E, 2 * I, H});
  const TensorInfo& dn = ck.require(down, kFloatOrBlockWeights,
                                    flat ? std::vector<int64_t>{int64_t(E) * H, I}
                                         : std::vector<int64_t>{E, H, I});
  // Expert e's rows: gate [e·2I, e·2I + I), up [e·2I + I, (e+1)·2I) of gate_up; [e·H, (e+1)·H) of
  // down. Float rows are n_in elements, GGML block rows dtype_row_bytes(n_in) bytes.
  auto view = [](const TensorInfo& t, int64_t row0, int64_t n_out, int64_t n_in) {
    const bool block = dtype_is_block(t.dtype);
    const int64_t rb = block ? dtype_row_bytes(t.dtype, n_in) : n_in * int64_t(dtype_size(t.dtype));
    const uint8_t* p = static_cast<const uint8_t*>(t.data) + size_t(row0) * size_t(rb);
    if (block) return ggml_weight(t.dtype, n_out, n_in, p);
    WeightMatrix w;
    w.dtype = t.dtype;
    w.n_out = n_out;
    w.n_in = n_in;
    w.data = p;
    return w;
  };
  for (int32_t e = 0; e < E; ++e) {
    m.gate.push_back(view(gu, int64_t(e) * 2 * I, I, H));
    m.up.push_back(view(gu, int64_t(e) * 2 * I + I, I, H));
    m.down.push_back(view(dn, int64_t(e) * H, H, I));
  }
}

MoEWeights load_moe(const Checkpoint& ck, const std::string& p, const MoESpec& s, int32_t H,
                    Fp8ScaleStore& store, int64_t bo, int64_t bi) {
  MoEWeights m;
  const int32_t E = s.n_routed_experts, I = s.moe_intermediate_size;
  load_router_f32(ck, p + "mlp.gate.weight", E, H, m);
  if (ck.find(p + "mlp.gate.e_score_correction_bias"))
    m.bias = load_vector(ck, p + "mlp.gate.e_score_correction_bias", E);
  else
    m.bias.assign(E, 0.0f);
  if (ck.contains(p + "mlp.experts.gate_up_proj")) {
    load_fused_experts(ck, p + "mlp.experts.gate_up_proj", p + "mlp.experts.down_proj", E, I, H, m);
    return m;
  }
  for (int32_t e = 0; e < E; ++e) {
    const std::string ep = str(p, "mlp.experts.", e, ".");
    m.gate.push_back(load_linear_fp8(ck, ep + "gate_proj.weight", I, H, 1, store, bo, bi));
    m.up.push_back(load_linear_fp8(ck, ep + "up_proj.weight", I, H, 1, store, bo, bi));
    m.down.push_back(load_linear_fp8(ck, ep + "down_proj.weight", H, I, 1, store, bo, bi));
  }
  return m;
}

void moe_route(const MoESpec& s, const float* logits, const float* bias, int32_t n, int32_t* idx,
               float* weights) {
  const int32_t E = s.n_routed_experts, K = s.n_experts_per_tok, G = s.n_group;
  const int32_t per_group = E / G;
  // Per-thread scratch, grown once: no allocation per routed row once warm.
  thread_local std::vector<float> sc, sel, gscore;
  thread_local std::vector<int32_t> order, gorder;
  thread_local std::vector<char> keep;
  sc.resize(E);
  sel.resize(E);
  order.resize(E);
  gorder.resize(G);
  gscore.resize(G);
  for (int32_t r = 0; r < n; ++r) {
    const float* l = logits + size_t(r) * E;
    if (s.scoring_func == "softmax") {
      float mx = -INFINITY, tot = 0.0f;
      for (int32_t e = 0; e < E; ++e) mx = std::max(mx, l[e]);
      for (int32_t e = 0; e < E; ++e) tot += (sc[e] = std::exp(l[e] - mx));
      for (int32_t e = 0; e < E; ++e) sel[e] = (sc[e] /= tot);
    } else {
      for (int32_t e = 0; e < E; ++e) {
        sc[e] = 1.0f / (1.0f + std::exp(-l[e]));
        sel[e] = sc[e] + bias[e];
      }
    }
    if (G > 1) {
      // Group score = sum of the group's two largest selection scores; keep topk_group groups.
      for (int32_t g = 0; g < G; ++g) {
        float a = -INFINITY, b = -INFINITY;
        for (int32_t e = g * per_group; e < (g + 1) * per_group; ++e) {
          if (sel[e] > a) {
            b = a;
            a = sel[e];
          } else if (sel[e] > b) {
            b = sel[e];
          }
        }
        gscore[g] = a + b;
      }
      std::iota(gorder.begin(), gorder.end(), 0);
      std::stable_sort(gorder.begin(), gorder.end(),
                       [&](int32_t x, int32_t y) { return gscore[x] > gscore[y]; });
      keep.assign(G, 0);
      for (int32_t j = 0; j < s.topk_group; ++j) keep[gorder[j]] = 1;
      for (int32_t e = 0; e < E; ++e)
        if (!keep[e / per_group]) sel[e] = -INFINITY;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t x, int32_t y) {
      return sel[x] > sel[y] || (sel[x] == sel[y] && x < y);
    });
    std::sort(order.begin(), order.begin() + K);  // ascending expert id (HF accumulation order)
    float sum = 0.0f;
    for (int32_t j = 0; j < K; ++j) sum += sc[order[j]];
    for (int32_t j = 0; j < K; ++j) {
      float w = sc[order[j]];
      if (s.norm_topk_prob) w /= (sum + 1e-20f);
      w *= s.routed_scaling_factor;
      idx[size_t(r) * K + j] = order[j];
      weights[size_t(r) * K + j] = w;
    }
  }
}

void moe_forward(const MoEWeights& mw, const MoESpec& s, const float* h, int32_t n, int32_t H,
                 float* out, MoEScratch& sc, ThreadPool& pool, int32_t* route_out,
                 const float* router_in) {
  const int32_t E = s.n_routed_experts, K = s.n_experts_per_tok, I = s.moe_intermediate_size;
  sc.logits.resize(size_t(n) * E);
  sc.idx.resize(size_t(n) * K);
  sc.w.resize(size_t(n) * K);
  ops::matmul(router_in ? router_in : h, n, mw.router, sc.logits.data(), pool);  // [n, E] fp32
  moe_route(s, sc.logits.data(), mw.bias.data(), n, sc.idx.data(), sc.w.data());
  if (!mw.expert_scale.empty())
    for (size_t i = 0; i < sc.w.size(); ++i) sc.w[i] *= mw.expert_scale[size_t(sc.idx[i])];
  if (route_out) std::copy(sc.idx.begin(), sc.idx.end(), route_out);
  std::fill(out, out + size_t(n) * H, 0.0f);
  sc.xg.resize(size_t(n) * H);
  sc.g.resize(size_t(n) * I);
  sc.u.resize(size_t(n) * I);
  sc.y.resize(size_t(n) * H);
  // Experts in ascending id; each row receives its contributions in ascending expert id, the
  // order HF's index_add_ loop uses, independent of which other rows share the pass.
  for (int32_t e = 0; e < E; ++e) {
    sc.rows.clear();
    sc.row_w.clear();
    for (int32_t r = 0; r < n; ++r)
      for (int32_t j = 0; j < K; ++j)
        if (sc.idx[size_t(r) * K + j] == e) {
          sc.rows.push_back(r);
          sc.row_w.push_back(sc.w[size_t(r) * K + j]);
        }
    const int32_t m = static_cast<int32_t>(sc.rows.size());
    if (m == 0) continue;
    for (int32_t i = 0; i < m; ++i)
      std::copy_n(h + size_t(sc.rows[i]) * H, H, sc.xg.data() + size_t(i) * H);
    ops::matmul(sc.xg.data(), m, mw.gate[e], sc.g.data(), pool);  // [m, I]
    ops::matmul(sc.xg.data(), m, mw.up[e], sc.u.data(), pool);    // [m, I]
    if (s.gelu_experts)
      ops::gelu_tanh_mul(sc.g.data(), sc.u.data(), int64_t(m) * I, sc.g.data());
    else
      ops::silu_mul(sc.g.data(), sc.u.data(), int64_t(m) * I, sc.g.data());
    ops::matmul(sc.g.data(), m, mw.down[e], sc.y.data(), pool);   // [m, H]
    for (int32_t i = 0; i < m; ++i) {
      float* o = out + size_t(sc.rows[i]) * H;
      const float* y = sc.y.data() + size_t(i) * H;
      const float w = sc.row_w[i];
      for (int32_t c = 0; c < H; ++c) o[c] += y[c] * w;
    }
  }
}

}  // namespace dfl
