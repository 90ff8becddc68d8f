// Architecture string → family factory.
#include "core/error.h"
#include "model/arch/families.h"

namespace dfl {

std::vector<KvLayerSpec> kv_layout(const ModelConfig& cfg) {
  std::vector<KvLayerSpec> kvs;
  // A sliding layer's ring holds the keys its resolved window can see: left + 1 (W with the HF/vLLM
  // edge, W + 1 with SGLang's), whatever the causality (a symmetric drafter window has the same left).
  for (const auto& l : cfg.layers)
    kvs.push_back({l.n_kv_heads, l.head_dim, l.v_head_dim,
                   l.attn == AttnKind::kSliding ? l.window.left + 1 : 0});
  return kvs;
}

std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir, const LoadOptions& opts,
                                         ThreadPool& pool) {
  ModelConfig cfg = load_model_config(dir);
  switch (cfg.family) {
    case Family::kQwen3:
      return make_qwen3(std::move(cfg), opts, pool);
    case Family::kMiMoV2:
      return make_mimo_v2(std::move(cfg), opts, pool);
    case Family::kDFlashDraft:
      throw Error(str("'", dir, "' holds a DFlash drafter (", cfg.architecture,
                      "), not a target model: pass it with --draft"));
    default:
      throw Error(str("architecture '", cfg.architecture, "' is not supported as a target yet"));
  }
}

}  // namespace dfl
