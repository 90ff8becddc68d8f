#include "model/dflash2_draft.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/config_json.h"

namespace dfl {

using namespace cfg;

std::optional<DFlash2Spec> parse_dflash2(const json* dc, const json& root,
                                         const std::string& speculators_type) {
  auto key = [&](const char* k) -> const json* {
    if (dc)
      if (const json* v = find_key(*dc, k); v && !v->is_null()) return v;
    const json* v = find_key(root, k);
    return v && !v->is_null() ? v : nullptr;
  };
  bool arch2 = false;
  if (const json* a = find_key(root, "architectures"); a && a->is_array() && !a->empty() && (*a)[0].is_string())
    arch2 = (*a)[0] == "DFlash2DraftModel" || (*a)[0] == "DFlash2Speculator";
  const bool spec2 = speculators_type == "dflash2";
  static const char* const kKeys[] = {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"};
  bool any = false;
  for (const char* k : kKeys) any = any || key(k);
  if (!arch2 && !spec2 && !any) return std::nullopt;

  DFlash2Spec s;
  if (spec2) {  // DFlash2SpeculatorConfig defaults (speculators 0.9)
    s.conv_kernel_size = 2;
    s.conv_group_size = 16;
    s.selector_rank = 256;
    s.selector_top_k = 16;
  }
  auto read = [&](const char* k, int32_t& dst) {
    if (const json* v = key(k)) {
      const int64_t x = as_int(*v, k);
      DFL_CHECK(x >= 0 && x <= (1 << 20), "config: DFlash2 ", k, " = ", x, " is out of range");
      dst = static_cast<int32_t>(x);
    }
  };
  read("conv_kernel_size", s.conv_kernel_size);
  read("conv_group_size", s.conv_group_size);
  read("selector_rank", s.selector_rank);
  read("selector_top_k", s.selector_top_k);
  DFL_CHECK((s.conv_kernel_size > 0) == (s.conv_group_size > 0),
            "config: DFlash2 needs conv_kernel_size and conv_group_size together (got ",
            s.conv_kernel_size, " and ", s.conv_group_size, ")");
  DFL_CHECK((s.selector_rank > 0) == (s.selector_top_k > 0),
            "config: DFlash2 needs selector_rank and selector_top_k together (got ", s.selector_rank,
            " and ", s.selector_top_k, ")");
  DFL_CHECK(s.has_conv() || s.has_selector(),
            "config: a DFlash2 drafter needs conv_kernel_size / conv_group_size and/or selector_rank / "
            "selector_top_k in dflash_config");
  if (const json* v = key("output_multiplier")) {
    DFL_CHECK(v->is_number() && std::isfinite(v->get<double>()), "config: output_multiplier must be a number");
    s.output_multiplier = v->get<float>();
  }
  if (const json* v = key("final_logit_softcapping")) {
    DFL_CHECK(v->is_number() && v->get<double>() > 0, "config: final_logit_softcapping must be > 0");
    s.final_logit_softcap = v->get<float>();
  }
  return s;
}

void dflash2_gguf_config(const GgufFile& f, json& c) {
  bool any = false;
  for (const char* k : {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"})
    if (f.has(str("dflash.", k))) {
      c["dflash_config"][k] = f.get_u32(str("dflash.", k));
      any = true;
    }
  if (any) c["architectures"] = {"DFlash2DraftModel"};
}

std::string dflash2_gguf_name(std::string_view n) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"selector_predecessor.weight", "candidate_selector.predecessor_codebook"},
      {"selector_successor.weight", "candidate_selector.successor_codebook"},
      {"selector_hidden.weight", "candidate_selector.hidden_projection.weight"}};
  for (const auto& [g, h] : kTop)
    if (n == g) return h;
  static const std::pair<const char*, const char*> kLayer[] = {
      {"attn_conv_base", "attention_conv.base_kernel"},
      {"attn_conv_proj.weight", "attention_conv.kernel_projection.weight"},
      {"ffn_conv_base", "mlp_conv.base_kernel"},
      {"ffn_conv_proj.weight", "mlp_conv.kernel_projection.weight"}};
  if (!n.starts_with("blk.")) return "";
  const size_t dot = n.find('.', 4);
  if (dot == std::string_view::npos) return "";
  const std::string_view il = n.substr(4, dot - 4), rest = n.substr(dot + 1);
  for (const auto& [g, h] : kLayer)
    if (rest == g) return str("layers.", il, ".", h);
  return "";
}

// ---- the convolution -------------------------------------------------------------------------

void DynamicConv::input(float* a, int32_t rows) {
  DFL_ASSERT(w_ && plan_ && rows == plan_->n_rows());
  float* dyn = Scratch::ensure(dyn_, size_t(rows) * w_->proj.n_out);
  ops::matmul(a, rows, w_->proj, dyn, *pool_);  // [rows, 2·k·G]
  apply(a, rows, 0);
}

void DynamicConv::output(float* y, int32_t rows) { apply(y, rows, 1); }

void DynamicConv::apply(float* x, int32_t rows, int32_t side) {
  const int64_t G = H_ / gs_, D = 2 * int64_t(k_) * G;
  float* out = Scratch::ensure(tmp_, size_t(rows) * H_);
  const float* base = w_->base.data() + size_t(side) * k_ * H_;  // [k, H]
  for (const PlanSegment& g : plan_->segments()) {
    for (int32_t t = 0; t < g.n; ++t) {
      const size_t r = size_t(g.row0 + t);
      const float* dyn = dyn_.data() + r * D + size_t(side) * k_ * G;  // [k, G] of row t
      float* o = out + r * H_;
      std::fill(o, o + H_, 0.0f);
      for (int32_t tap = 0; tap < k_ && tap <= t; ++tap) {
        const float* src = x + (r - tap) * H_;
        const float* b = base + size_t(tap) * H_;
        const float* d = dyn + size_t(tap) * G;
        for (int64_t gi = 0; gi < G; ++gi) {  // one dynamic coefficient per group of gs channels
          const float dg = d[gi];
          for (int64_t c = gi * gs_, e = c + gs_; c < e; ++c) o[c] += (b[c] + dg) * src[c];
        }
      }
    }
  }
  std::copy_n(out, size_t(rows) * H_, x);
}

// ---- loading ---------------------------------------------------------------------------------

DFlash2Parts::DFlash2Parts(const Checkpoint& ck, const std::string& prefix, const ModelConfig& cfg,
                           const LoadOptions& opts, ThreadPool* pool)
    : spec_(*cfg.dflash->v2),
      H_(cfg.hidden_size),
      conv_(cfg.hidden_size, std::max(1, spec_.conv_kernel_size), std::max(1, spec_.conv_group_size)) {
  const int32_t H = cfg.hidden_size, B = cfg.dflash->block_size;
  // speculators' DFlash2 requires the verifier's full vocabulary (the selector's codebooks and the
  // candidates are target ids); so does this.
  DFL_CHECK(cfg.dflash->draft_vocab_size == 0 || cfg.dflash->draft_vocab_size == cfg.vocab_size,
            "DFlash2 drafter with draft_vocab_size ", cfg.dflash->draft_vocab_size, " != vocab_size ",
            cfg.vocab_size, ": DFlash2 needs the full verifier vocabulary");
  if (spec_.has_conv()) {
    const int32_t k = spec_.conv_kernel_size, gs = spec_.conv_group_size;
    DFL_CHECK(H % gs == 0, "config: DFlash2 conv_group_size ", gs, " does not divide hidden_size ", H);
    DFL_CHECK(k <= B, "config: DFlash2 conv_kernel_size ", k, " exceeds block_size ", B);
    const int64_t D = 2 * int64_t(k) * (H / gs);
    for (int32_t il = 0; il < cfg.n_layers; ++il)
      for (auto [name, dst] : {std::pair{"attention_conv", &attn_conv_}, std::pair{"mlp_conv", &mlp_conv_}}) {
        const std::string p = str(prefix, "layers.", il, ".", name, ".");
        DynamicConvWeights w;
        // [2, k, H]; GGUF checkpoints report it row-flattened as [2·k, H] (same element order).
        const TensorInfo* bt = ck.find(p + "base_kernel");
        const bool flat = bt && bt->shape.size() == 2;
        w.base = flat ? load_f32(ck, p + "base_kernel", {2 * int64_t(k), H})
                      : load_f32(ck, p + "base_kernel", {2, k, H});
        w.proj = load_linear(ck, p + "kernel_projection.weight", D, H);
        convert_weight(w.proj, opts, owned_, pool);
        dst->push_back(std::move(w));
      }
  }
  if (spec_.has_selector()) {
    const int32_t r = spec_.selector_rank;
    DFL_CHECK(spec_.selector_top_k <= cfg.vocab_size, "config: selector_top_k ", spec_.selector_top_k,
              " exceeds vocab_size ", cfg.vocab_size);
    const std::string p = prefix + "candidate_selector.";
    hidden_proj_ = load_linear(ck, p + "hidden_projection.weight", r, H);
    convert_weight(hidden_proj_, opts, owned_, pool);
    pred_ = load_linear(ck, p + "predecessor_codebook", cfg.vocab_size, r);
    succ_ = load_linear(ck, p + "successor_codebook", cfg.vocab_size, r);
  }
}

SublayerWrap* DFlash2Parts::attention_conv(int32_t il, const StepPlan& plan, ThreadPool& pool) {
  if (!spec_.has_conv()) return nullptr;
  conv_.bind(&attn_conv_[il], &plan, &pool);
  return &conv_;
}

SublayerWrap* DFlash2Parts::mlp_conv(int32_t il, const StepPlan& plan, ThreadPool& pool) {
  if (!spec_.has_conv()) return nullptr;
  conv_.bind(&mlp_conv_[il], &plan, &pool);
  return &conv_;
}

// ---- the selector ----------------------------------------------------------------------------

void DFlash2Parts::project(const float* hidden, int32_t n, float* proj, ThreadPool& pool) const {
  DFL_ASSERT(spec_.has_selector());
  ops::matmul(hidden, n, hidden_proj_, proj, pool);
}

void DFlash2Parts::transform(float* x, int64_t n) const {
  if (spec_.output_multiplier != 1.0f)
    for (int64_t i = 0; i < n; ++i) x[i] *= spec_.output_multiplier;
  if (const float cap = spec_.final_logit_softcap; cap > 0)
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void DFlash2Parts::score(const float* logits, int64_t V, const float* proj_row, int32_t prev,
                         SelectorRow& out) const {
  const int32_t K = spec_.selector_top_k, r = spec_.selector_rank;
  DFL_CHECK(prev >= 0 && prev < pred_.n_out, "DFlash2 selector: predecessor token ", prev,
            " is outside the codebook (", pred_.n_out, " rows)");
  // Top-K of the raw logits (the transform is monotone), by decreasing value, lower id on ties:
  // one pass keeping the K best in order (a later equal value goes after the earlier id).
  out.ids.clear();
  out.unary.clear();
  for (int64_t i = 0; i < V; ++i) {
    const float v = logits[i];
    if (int32_t(out.ids.size()) == K && !(v > out.unary.back())) continue;
    size_t at = out.unary.size();
    while (at > 0 && out.unary[at - 1] < v) --at;
    out.unary.insert(out.unary.begin() + at, v);
    out.ids.insert(out.ids.begin() + at, int32_t(i));
    if (int32_t(out.ids.size()) > K) {
      out.unary.pop_back();
      out.ids.pop_back();
    }
  }
  transform(out.unary.data(), K);
  // context[r] = pred[prev, r] · proj[r]; score_k = unary_k + ⟨context, succ[cand_k]⟩
  float* pr = Scratch::ensure(prev_row_, size_t(r));
  rows_to_f32(pred_, &prev, 1, pr);
  for (int32_t i = 0; i < r; ++i) pr[i] *= proj_row[i];
  float* sr = Scratch::ensure(succ_rows_, size_t(K) * r);
  rows_to_f32(succ_, out.ids.data(), K, sr);
  out.scores.resize(size_t(K));
  for (int32_t k = 0; k < K; ++k) {
    double dot = 0.0;
    for (int32_t i = 0; i < r; ++i) dot += double(pr[i]) * sr[size_t(k) * r + i];
    out.scores[k] = out.unary[k] + float(dot);
  }
}

int32_t DFlash2Parts::best(const SelectorRow& row) {
  return static_cast<int32_t>(std::max_element(row.scores.begin(), row.scores.end()) - row.scores.begin());
}

void DFlash2Parts::distribution(const SelectorRow& row, float temperature, std::vector<float>& q) {
  DFL_ASSERT(temperature > 0);
  const size_t K = row.scores.size();
  q.resize(K);
  const float m = *std::max_element(row.scores.begin(), row.scores.end());
  double sum = 0.0;
  for (size_t k = 0; k < K; ++k) sum += q[k] = std::exp((row.scores[k] - m) / temperature);
  for (size_t k = 0; k < K; ++k) q[k] = float(q[k] / sum);
}

int64_t DFlash2Parts::weight_bytes() const {
  int64_t b = 0;
  for (const auto& w : attn_conv_) b += dfl::weight_bytes(w.proj);
  for (const auto& w : mlp_conv_) b += dfl::weight_bytes(w.proj);
  if (spec_.has_selector()) b += dfl::weight_bytes(hidden_proj_);  // codebooks: K + 1 rows a step
  return b;
}

}  // namespace dfl
