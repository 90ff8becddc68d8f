// DFlash2 (inco.ai / z-lab `DFlash2DraftModel`, speculators `dflash2`; DFLASH-SPEC §6): the DFlash
// drafter (model/dflash_draft.h, which owns one of these when the config says DFlash2) plus
//
// 1. a grouped dynamic causal convolution around the attention and the MLP of every layer,
//    `layers.i.{attention,mlp}_conv.{base_kernel [2, k, H], kernel_projection.weight [2·k·G, H]}`
//    (k = conv_kernel_size, G = H / conv_group_size groups). With a = the normed sublayer input
//    over one block's rows, dyn = a · kernel_projectionᵀ viewed [rows, 2, k, G]:
//      conv_s(x)[t, c] = Σ_{o<k, t−o ≥ 0} (base[s, o, c] + dyn[t, s, o, c / group]) · x[t−o, c]
//    (t, t−o rows of the same block: taps are zero across the block start). The sublayer runs on
//    conv_0(a) and its output y becomes conv_1(y), both with the coefficients of the pre-conv a.
//    Context rows (KV injection) are not convolved.
// 2. a candidate selector, `candidate_selector.{hidden_projection.weight [r, H],
//    predecessor_codebook [V, r], successor_codebook [V, r]}`: for each drafted row j with final
//    hidden h_j and target-head logits l_j, the K = selector_top_k largest logits are the
//    candidates; unary = softcap(l · output_multiplier) on them; with prev the token chosen for
//    the row before (the anchor for the first drafted row)
//      score_k = unary_k + Σ_r pred[prev, r] · (h_j · projᵀ)[r] · succ[cand_k, r].
//    T = 0 drafts the argmax; T > 0 samples softmax(score / T) over the K candidates, which is the
//    draft distribution q of rejection sampling (zero outside the candidates).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/step_plan.h"
#include "core/threadpool.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "model/blocks.h"
#include "model/config.h"
#include "model/weights.h"

namespace dfl {

// The DFlash2 keys of a drafter config (nullopt when it is a plain DFlash drafter). `dc` is the
// dflash_config object (or null), `root` the top level as written (the speculators dialect keeps
// the keys there), `speculators_type` its speculators_model_type ("" for z-lab configs).
std::optional<DFlash2Spec> parse_dflash2(const nlohmann::json* dc, const nlohmann::json& root,
                                         const std::string& speculators_type);

// GGUF DFlash2 drafters (llama.cpp's `dflash` architecture with the DFlash2 keys): adds
// `dflash.{conv_kernel_size, conv_group_size, selector_rank, selector_top_k}` to the HF-style config
// `c` (dflash_config) and names the architecture DFlash2DraftModel when any is present.
void dflash2_gguf_config(const GgufFile& f, nlohmann::json& c);
// The HF name of a DFlash2 GGUF tensor (blk.N.{attn,ffn}_conv_{base,proj.weight},
// selector_{predecessor,successor,hidden}.weight), or "" for any other tensor.
std::string dflash2_gguf_name(std::string_view gguf_name);

// One grouped dynamic causal convolution pair (file comment, part 1).
struct DynamicConvWeights {
  std::vector<float> base;  // [2, k, H]
  WeightMatrix proj;        // [2·k·G, H]
};

// Applies a layer's convolution around one sublayer of a block pass (the blocks are the plan's
// segments). Reusable across layers and passes; no allocation once warm.
class DynamicConv final : public SublayerWrap {
 public:
  DynamicConv(int32_t hidden, int32_t kernel, int32_t group) : H_(hidden), k_(kernel), gs_(group) {}
  void bind(const DynamicConvWeights* w, const StepPlan* plan, ThreadPool* pool) {
    w_ = w;
    plan_ = plan;
    pool_ = pool;
  }
  void input(float* a, int32_t rows) override;   // dyn from a, then a := conv_0(a)
  void output(float* y, int32_t rows) override;  // y := conv_1(y)

 private:
  void apply(float* x, int32_t rows, int32_t side);
  int32_t H_, k_, gs_;
  const DynamicConvWeights* w_ = nullptr;
  const StepPlan* plan_ = nullptr;
  ThreadPool* pool_ = nullptr;
  std::vector<float> dyn_, tmp_;
};

// The selector's per-row output (file comment, part 2).
struct SelectorRow {
  std::vector<int32_t> ids;   // [K] candidate token ids, by decreasing logit
  std::vector<float> unary;   // [K] transformed logits of the candidates
  std::vector<float> scores;  // [K] unary + transition from prev
};

class DFlash2Parts {
 public:
  // Loads the convolutions of every layer and the selector from `ck` ("<prefix>layers.i...",
  // "<prefix>candidate_selector..."), as the spec says they exist; matrices get opts' format.
  DFlash2Parts(const Checkpoint& ck, const std::string& prefix, const ModelConfig& cfg,
               const LoadOptions& opts, ThreadPool* pool);

  const DFlash2Spec& spec() const { return spec_; }
  // The wraps of layer il for a pass over `plan` (null without convolutions).
  SublayerWrap* attention_conv(int32_t il, const StepPlan& plan, ThreadPool& pool);
  SublayerWrap* mlp_conv(int32_t il, const StepPlan& plan, ThreadPool& pool);

  // Selector (spec().has_selector()). proj [n, r] = hidden [n, H] · hidden_projectionᵀ.
  void project(const float* hidden, int32_t n, float* proj, ThreadPool& pool) const;
  // Candidates, unary and scores of one drafted row: logits [V] from the target head, proj_row
  // [r] of its hidden, prev the token before it.
  void score(const float* logits, int64_t vocab, const float* proj_row, int32_t prev,
             SelectorRow& out) const;
  // Greedy pick: index into out.ids of the best score (first on ties).
  static int32_t best(const SelectorRow& row);
  // q [K] = softmax(scores / temperature).
  static void distribution(const SelectorRow& row, float temperature, std::vector<float>& q);
  // Unary transform on `n` logits in place (multiplier, then softcap).
  void transform(float* logits, int64_t n) const;

  int64_t weight_bytes() const;

 private:
  DFlash2Spec spec_;
  int32_t H_ = 0;
  std::vector<DynamicConvWeights> attn_conv_, mlp_conv_;
  DynamicConv conv_;
  WeightMatrix hidden_proj_;   // [r, H]
  WeightMatrix pred_, succ_;   // [V, r] as stored (rows read on demand)
  OwnedWeights owned_;
  mutable std::vector<float> prev_row_, succ_rows_;
};

}  // namespace dfl
