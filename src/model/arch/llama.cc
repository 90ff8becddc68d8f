// Llama 3 dense (LlamaForCausalLM): Qwen3's stack without the q/k norms — embedding → L ×
// [RMSNorm → attention (GQA, NeoX RoPE with optional llama3 / linear / yarn scaling) → residual →
// RMSNorm → SwiGLU → residual] → RMSNorm → lm_head, on the shared decoder skeleton.
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

void parse_llama(const nlohmann::json& root, ModelConfig& c, const ConfigOptions&) {
  c.family = Family::kLlama;
  parse_common(root, c);
  DFL_CHECK(!opt_bool(root, "mlp_bias").value_or(false), "config: mlp_bias=true is not supported");
  LayerSpec proto = base_layer(root, c);
  proto.attn = AttnKind::kFull;
  proto.window = causal_window(AttnKind::kFull, 0);
  c.layers.assign(c.n_layers, proto);
}

class LlamaModel final : public DecoderLM {
 public:
  LlamaModel(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool)
      : DecoderLM(std::move(cfg), pool) {
    const int32_t H = cfg_.hidden_size, V = cfg_.vocab_size;
    head_.vocab = V;
    head_.hidden = H;
    head_.eps = cfg_.rms_norm_eps;
    head_.embed = load_linear(ck_, "model.embed_tokens.weight", V, H);
    head_.final_norm = load_vector(ck_, "model.norm.weight", H);
    if (cfg_.tie_word_embeddings) {
      head_.lm_head = head_.embed;
      (void)ck_.find("lm_head.weight");
    } else {
      head_.lm_head = load_linear(ck_, "lm_head.weight", V, H);
    }
    load_layers(opts, [&](int32_t il) {
      return load_dense_layer(ck_, str("model.layers.", il, "."), cfg_.layers[il], H,
                              cfg_.intermediate_size, opts, &pool, /*qk_norm=*/false);
    });
    finish_load(opts);
  }
};

// GGUF (llama.cpp's converter, `general.architecture` = llama): the shared decoder dialect.
nlohmann::json llama_gguf_config(const GgufFile& f) {
  nlohmann::json c = gguf_decoder_config(f, "llama");
  c["architectures"] = {"LlamaForCausalLM"};
  c["model_type"] = "llama";
  return c;
}

std::unique_ptr<CausalLM> make_llama(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) {
  return std::make_unique<LlamaModel>(std::move(cfg), opts, pool);
}

}  // namespace

// GGUF `llama`: q/k rows permuted by the converter (undone at load, llama_qk_row_order).
const FamilyEntry kLlamaFamily = {Family::kLlama,    {"LlamaForCausalLM"}, {"llama"},
                                  nullptr,           parse_llama,          make_llama,
                                  {"llama"},         llama_gguf_config,    gguf_decoder_tensor_name,
                                  llama_qk_row_order};

}  // namespace dfl
