// Architecture → family factory, and the model-side KV layout.
#include "core/error.h"
#include "model/arch/families.h"

namespace dfl {

std::vector<KvLayerSpec> kv_layout(const ModelConfig& cfg) {
  std::vector<KvLayerSpec> kvs;
  for (const auto& l : cfg.layers)
    kvs.push_back(kv_layer_spec(l.attn == AttnKind::kSliding, l.window, l.n_kv_heads, l.head_dim,
                                l.v_head_dim));
  return kvs;
}

std::unique_ptr<KvPool> make_kv_pool(const ModelConfig& cfg, const KvPoolOptions& opts) {
  return std::make_unique<KvPool>(kv_layout(cfg), opts);
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
