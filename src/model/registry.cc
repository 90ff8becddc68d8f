// The one table of model families (each defined in its own arch file), architecture → family,
// and the model-side KV layout.
#include <algorithm>

#include "core/error.h"
#include "model/family.h"

namespace dfl {

const std::vector<const FamilyEntry*>& all_families() {
  static const std::vector<const FamilyEntry*> table = {&kDFlashDraftFamily, &kQwen3Family,
                                                        &kMiMoV2Family, &kGemma3Family, &kQwen35Family,
                                                        &kLlamaFamily, &kGemma4Family};
  return table;
}

std::string FamilyEntry::default_architecture(const std::string& model_type) const {
  for (size_t i = 0; i < model_types.size() && i < architectures.size(); ++i)
    if (model_types[i] == model_type) return architectures[i];
  return architectures.empty() ? std::string() : architectures[0];
}

const FamilyEntry* find_family(const nlohmann::json& root, const std::string& architecture,
                               const std::string& model_type) {
  for (const FamilyEntry* f : all_families())
    if (f->claims && f->claims(root)) return f;
  for (const FamilyEntry* f : all_families())
    if (std::find(f->architectures.begin(), f->architectures.end(), architecture) != f->architectures.end())
      return f;
  if (architecture.empty())
    for (const FamilyEntry* f : all_families())
      if (std::find(f->model_types.begin(), f->model_types.end(), model_type) != f->model_types.end())
        return f;
  return nullptr;
}

const FamilyEntry* find_gguf_family(const std::string& arch) {
  for (const FamilyEntry* f : all_families())
    if (std::find(f->gguf_architectures.begin(), f->gguf_architectures.end(), arch) !=
        f->gguf_architectures.end())
      return f;
  return nullptr;
}

const FamilyEntry& family_of(const ModelConfig& c) {
  for (const FamilyEntry* f : all_families())
    if (f->family == c.family) return *f;
  throw Error(str("no family entry for '", c.architecture, "'"));
}

std::vector<KvLayerSpec> kv_layout(const ModelConfig& cfg, int32_t begin, int32_t end) {
  std::vector<KvLayerSpec> kvs;
  const int32_t n = int32_t(cfg.layers.size());
  for (int32_t il = std::max(0, begin); il < (end < 0 ? n : std::min(end, n)); ++il)
    // (recurrent layers keep no KV: kv/recurrent_state.h)
    if (const LayerSpec& l = cfg.layers[size_t(il)]; l.mixer == MixerKind::kAttention)
      kvs.push_back(kv_layer_spec(l.attn == AttnKind::kSliding, l.window, l.n_kv_heads, l.head_dim,
                                l.v_head_dim));
  return kvs;
}

std::unique_ptr<KvPool> make_kv_pool(const ModelConfig& cfg, const KvPoolOptions& opts) {
  return std::make_unique<KvPool>(kv_layout(cfg), opts);
}

std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir, const LoadOptions& opts,
                                         ThreadPool& pool) {
  ModelConfig cfg = load_model_config(dir, opts.config);
  for (const FamilyEntry* f : all_families()) {
    if (f->family != cfg.family) continue;
    DFL_CHECK(f->make, "'", dir, "' holds a DFlash drafter (", cfg.architecture,
              "), not a target model: pass it with --draft");
    return f->make(std::move(cfg), opts, pool);
  }
  throw Error(str("architecture '", cfg.architecture, "' is not supported as a target yet"));
}

}  // namespace dfl
