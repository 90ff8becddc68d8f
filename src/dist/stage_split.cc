#include "dist/stage_split.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/decoder.h"

namespace dfl {

int64_t WeightBytes::total() const {
  int64_t t = embed + (tied ? 0 : lm_head) + other;
  for (int64_t b : layer) t += b;
  return t;
}

WeightBytes weight_bytes_of(const Checkpoint& ck, const ModelConfig& cfg) {
  WeightBytes w;
  w.layer.assign(size_t(cfg.n_layers), 0);
  for (const std::string& n : ck.names()) {
    if (is_mtp_tensor(n)) continue;  // not loaded
    const TensorInfo* t = ck.find(n);
    const int64_t b = int64_t(t->nbytes);
    const int32_t il = decoder_layer_of(n);
    if (il >= 0 && il < cfg.n_layers)
      w.layer[size_t(il)] += b;
    else if (n.find("embed_tokens.") != std::string::npos)
      w.embed += b;
    else if (n.rfind("lm_head.", 0) == 0)
      w.lm_head += b;
    else if (il < 0)
      w.other += b;
  }
  w.tied = cfg.tie_word_embeddings && w.lm_head == 0;
  if (w.tied) w.lm_head = w.embed;  // streamed per token all the same
  return w;
}

WeightBytes estimate_weight_bytes(const ModelConfig& cfg) {
  double wb = cfg.torch_dtype == "float32" ? 4.0 : 2.0;
  if (cfg.mimo && cfg.mimo->fp8)
    wb = 1.0 + 4.0 / (double(cfg.mimo->fp8_block_out) * double(cfg.mimo->fp8_block_in));
  const double H = cfg.hidden_size;
  WeightBytes w;
  for (const LayerSpec& l : cfg.layers) {
    double p = 0;
    if (l.mixer == MixerKind::kAttention) {
      const double q = double(l.n_heads) * l.head_dim * (l.out_gate ? 2 : 1);
      p += H * (q + double(l.n_kv_heads) * (l.head_dim + l.v_head_dim)) + double(l.n_heads) * l.v_head_dim * H;
    } else if (cfg.gdn) {
      const GdnSpec& g = *cfg.gdn;
      p += H * (double(g.conv_dim()) + g.value_dim() + 2.0 * g.n_v_heads) + double(g.value_dim()) * H;
    }
    if (l.moe && cfg.moe) {
      const MoESpec& m = *cfg.moe;
      p += double(m.n_routed_experts) * 3.0 * H * m.moe_intermediate_size + H * m.n_routed_experts +
           (m.shared_intermediate_size > 0 ? 3.0 * H * m.shared_intermediate_size + H : 0.0);
    } else {
      p += 3.0 * H * cfg.intermediate_size;
    }
    w.layer.push_back(int64_t(p * wb));
  }
  w.embed = int64_t(double(cfg.vocab_size) * H * 2.0);
  w.tied = cfg.tie_word_embeddings;
  w.lm_head = w.embed;
  return w;
}

std::vector<StageRange> split_by_bytes(const WeightBytes& w, int32_t n) {
  const int32_t L = int32_t(w.layer.size());
  DFL_CHECK(n >= 1 && n <= L, "--pipeline-parallel ", n, " needs 1..", L,
            " stages (one layer at least per stage)");
  // Cost per layer; the lm_head rides with the last layer (it runs on the last stage).
  std::vector<double> prefix(size_t(L) + 1, 0.0);
  for (int32_t i = 0; i < L; ++i)
    prefix[size_t(i) + 1] = prefix[size_t(i)] + double(w.layer[size_t(i)]) +
                            (i == L - 1 ? double(w.lm_head) : 0.0);
  const double total = prefix[size_t(L)];
  std::vector<StageRange> st;
  int32_t b = 0;
  for (int32_t s = 0; s < n; ++s) {
    int32_t e = L;
    if (s < n - 1) {
      // The cut closest to the even share, leaving one layer at least for every later stage.
      const double target = total * double(s + 1) / double(n);
      const int32_t lo = b + 1, hi = L - (n - 1 - s);
      e = lo;
      for (int32_t c = lo; c <= hi; ++c)
        if (std::abs(prefix[size_t(c)] - target) < std::abs(prefix[size_t(e)] - target)) e = c;
    }
    st.push_back({b, e});
    b = e;
  }
  return st;
}

std::vector<StageRange> split_from_counts(const std::string& csv, int32_t L, int32_t n) {
  std::vector<StageRange> st;
  std::stringstream ss(csv);
  std::string item;
  int32_t b = 0;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long c = std::strtol(item.c_str(), &end, 10);
    DFL_CHECK(!item.empty() && end && *end == '\0' && c >= 1 && c <= L, "--pp-layers: '", item,
              "' is not a layer count in [1, ", L, "]");
    st.push_back({b, b + int32_t(c)});
    b += int32_t(c);
  }
  DFL_CHECK(int32_t(st.size()) == n, "--pp-layers gives ", st.size(), " stages for --pipeline-parallel ", n);
  DFL_CHECK(b == L, "--pp-layers counts sum to ", b, " but the model has ", L, " layers");
  return st;
}

int32_t stage_of_aux(const std::vector<StageRange>& stages, int32_t idx) {
  if (idx <= 0) return 0;
  for (size_t s = 0; s < stages.size(); ++s)
    if (idx - 1 >= stages[s].begin && idx - 1 < stages[s].end) return int32_t(s);
  return int32_t(stages.size()) - 1;
}

int64_t boundary_bytes_per_row(const std::vector<StageRange>& stages, int32_t s, int32_t hidden,
                               const std::vector<int32_t>& aux, bool row_has_taps) {
  int64_t cols = 1;
  if (row_has_taps)
    for (int32_t idx : aux) cols += stage_of_aux(stages, idx) <= s;
  return cols * hidden * int64_t(sizeof(float));
}

int64_t stage_weight_bytes(const WeightBytes& w, const std::vector<StageRange>& stages, int32_t s) {
  int64_t b = 0;
  for (int32_t il = stages[size_t(s)].begin; il < stages[size_t(s)].end; ++il) b += w.layer[size_t(il)];
  const bool first = s == 0, last = s + 1 == int32_t(stages.size());
  if (first || last) b += w.embed;
  if (last) b += w.other + (w.tied ? 0 : w.lm_head);
  return b;
}

std::string stages_str(const std::vector<StageRange>& stages) {
  std::string s;
  for (size_t i = 0; i < stages.size(); ++i)
    s += str(i ? "," : "", stages[i].begin, "-", stages[i].end - 1);
  return s;
}

}  // namespace dfl
