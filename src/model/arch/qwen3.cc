// Qwen3 dense (Qwen3ForCausalLM): embedding → L × [RMSNorm → attention (q/k per-head RMSNorm
// before NeoX RoPE, GQA) → residual → RMSNorm → SwiGLU → residual] → RMSNorm → lm_head.
// Everything but the loading is the shared decoder skeleton (model/decoder.h).
#include <memory>

#include "core/error.h"
#include "model/config_json.h"
#include "model/decoder.h"
#include "model/family.h"
#include "model/gguf_dialect.h"
#include "model/weights.h"

namespace dfl {

namespace {

using namespace cfg;

void parse_qwen3(const nlohmann::json& root, ModelConfig& c, const ConfigOptions& opts) {
  c.family = Family::kQwen3;
  parse_common(root, c);
  const LayerSpec proto = base_layer(root, c);
  const bool use_sw = opt_bool(root, "use_sliding_window").value_or(false);
  DFL_CHECK(!use_sw, "config: Qwen3 use_sliding_window=true is not supported");
  c.layers.assign(c.n_layers, proto);
  for (auto& l : c.layers) {
    l.attn = AttnKind::kFull;
    l.window = causal_window(AttnKind::kFull, 0);
  }
}

class Qwen3Model final : public DecoderLM {
 public:
  Qwen3Model(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool)
      : DecoderLM(std::move(cfg), pool) {
    const int32_t H = cfg_.hidden_size, V = cfg_.vocab_size;
    head_.vocab = V;
    head_.hidden = H;
    head_.eps = cfg_.rms_norm_eps;
    head_.embed = load_linear(ck_, "model.embed_tokens.weight", V, H);
    head_.final_norm = load_vector(ck_, "model.norm.weight", H);
    if (cfg_.tie_word_embeddings) {
      head_.lm_head = head_.embed;
      (void)ck_.find("lm_head.weight");  // some exports keep the tied copy: accept it
    } else {
      head_.lm_head = load_linear(ck_, "lm_head.weight", V, H);
    }
    load_layers(opts, [&](int32_t il) {
      return load_dense_layer(ck_, str("model.layers.", il, "."), cfg_.layers[il], H,
                              cfg_.intermediate_size, opts, &pool);
    });
    finish_load(opts);
  }
};

// GGUF (llama.cpp's converter, `general.architecture` = qwen3): the shared decoder dialect.
nlohmann::json qwen3_gguf_config(const GgufFile& f) {
  nlohmann::json c = gguf_decoder_config(f, "qwen3");
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["model_type"] = "qwen3";
  return c;
}

std::unique_ptr<CausalLM> make_qwen3(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) {
  return std::make_unique<Qwen3Model>(std::move(cfg), opts, pool);
}

}  // namespace

const FamilyEntry kQwen3Family = {Family::kQwen3,       {"Qwen3ForCausalLM"}, {"qwen3"},
                                  nullptr,             parse_qwen3,          make_qwen3,
                                  {"qwen3"},           qwen3_gguf_config,    gguf_decoder_tensor_name};

}  // namespace dfl
