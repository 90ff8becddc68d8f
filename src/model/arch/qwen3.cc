// Qwen3 dense (Qwen3ForCausalLM): embedding → L × [RMSNorm → attention (q/k per-head RMSNorm
// before NeoX RoPE, GQA) → residual → RMSNorm → SwiGLU → residual] → RMSNorm → lm_head.
#include <memory>
#include <numeric>

#include "core/error.h"
#include "model/arch/families.h"
#include "model/blocks.h"
#include "model/weights.h"

namespace dfl {

namespace {

class Qwen3Model final : public CausalLM {
 public:
  Qwen3Model(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool)
      : cfg_(std::move(cfg)), ck_(cfg_.dir), pool_(pool) {
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
    for (int32_t il = 0; il < cfg_.n_layers; ++il) {
      layers_.push_back(load_dense_layer(ck_, str("model.layers.", il, "."), cfg_.layers[il], H,
                                         cfg_.intermediate_size, opts, &pool));
    }
    convert_weight(head_.lm_head, opts, owned_, &pool);  // head_.embed stays as stored (rows are read)
    require_all_used(ck_, cfg_);
    rope_ = RopeTable(cfg_.layers[0].rope);
    const int32_t max_ctx = std::min(opts.max_context, cfg_.max_position_embeddings);
    kv_ = KvCache(kv_layout(cfg_), opts.n_seqs, max_ctx, opts.max_block);
  }

  const ModelConfig& config() const override { return cfg_; }
  KvCache& kv() override { return kv_; }

  void embed(const int32_t* tokens, int64_t n, float* out) const override {
    head_.embed_rows(tokens, n, out);
  }

  void lm_head(const float* x_normed, int64_t n, float* logits) override {
    head_.logits(x_normed, n, logits, pool_);
  }

  void norm_and_lm_head(const float* x, int64_t n, float* logits) override {
    head_.norm_logits(x, n, logits, head_tmp_, pool_);
  }

  void forward(const ForwardArgs& a, ForwardOut& out) override {
    const int32_t H = cfg_.hidden_size, n = a.n;
    begin_forward(a, kv_, cfg_.n_layers, H, out);
    x_.resize(size_t(n) * H);
    embed(a.tokens, n, x_.data());
    capture_aux(a, 0, x_.data(), 0, n, H, out);
    for (int32_t il = 0; il < cfg_.n_layers; ++il) {
      const LayerSpec& s = cfg_.layers[il];
      attention_block(layers_[il], s, rope_, x_.data(), n, a.pos0, H, cfg_.rms_norm_eps, 1.0f, kv_,
                      a.seq, il, sc_, pool_);
      mlp_block(layers_[il], x_.data(), n, H, cfg_.intermediate_size, cfg_.rms_norm_eps, sc_, pool_);
      capture_aux(a, il + 1, x_.data(), 0, n, H, out);
    }
    kv_.commit_length(a.seq, a.pos0 + n);
    const int64_t V = cfg_.vocab_size;
    if (a.logits == LogitsMode::kAll) {
      out.logits.resize(size_t(n) * V);
      norm_and_lm_head(x_.data(), n, out.logits.data());
    } else if (a.logits == LogitsMode::kLast) {
      out.logits.resize(V);
      norm_and_lm_head(x_.data() + size_t(n - 1) * H, 1, out.logits.data());
    } else {
      out.logits.clear();
    }
  }

  int64_t weight_bytes_per_token() const override {
    int64_t b = 0;
    for (const auto& l : layers_) b += l.matrix_bytes();
    return b + weight_bytes(head_.lm_head) + cfg_.hidden_size * int64_t(dtype_size(head_.embed.dtype));
  }

 private:
  ModelConfig cfg_;
  Checkpoint ck_;
  ThreadPool& pool_;
  OutputHead head_;
  std::vector<float> head_tmp_;
  OwnedWeights owned_;  // load-time copy of the lm_head (Q8 / prepacked), if any
  std::vector<DenseLayer> layers_;
  RopeTable rope_;
  KvCache kv_;
  Scratch sc_;
  std::vector<float> x_;
};

}  // namespace

std::unique_ptr<CausalLM> make_qwen3(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) {
  return std::make_unique<Qwen3Model>(std::move(cfg), opts, pool);
}

}  // namespace dfl
