#include "model/dflash_draft.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/mmap.h"
#include "io/torch_pickle.h"
#include "model/weights.h"

namespace dfl {

std::string mask_embedding_file(const std::string& dir) {
  const std::string path = dir + "/mask_embedding.pt";
  return file_exists(path) ? path : std::string();
}

DFlashDraftModel::DFlashDraftModel(const std::string& dir, const CausalLM& target,
                                   const LoadOptions& opts, ThreadPool& pool)
    : cfg_(load_model_config(dir)), ck_(dir), pool_(pool) {
  DFL_CHECK(cfg_.family == Family::kDFlashDraft, "'", dir, "' is not a DFlash drafter (architecture '",
            cfg_.architecture, "')");
  const ModelConfig& tc = target.config();
  const DFlashSpec& d = *cfg_.dflash;
  const int32_t H = cfg_.hidden_size, Ht = tc.hidden_size, K = int32_t(d.target_layer_ids.size());
  DFL_CHECK(H == Ht, "drafter hidden_size ", H, " does not match the target's ", Ht);
  DFL_CHECK(cfg_.vocab_size == tc.vocab_size || d.mask_token_id < tc.vocab_size,
            "drafter mask_token_id ", d.mask_token_id, " is outside the target vocabulary");
  for (int32_t t : d.target_layer_ids) {
    DFL_CHECK(t >= 0 && t < tc.n_layers, "drafter target_layer_ids names layer ", t,
              " but the target has ", tc.n_layers, " layers");
    aux_.push_back(t + 1);  // tap t = output of target layer t = aux index t + 1
  }
  prefix_ = ck_.contains("model.fc.weight") || ck_.contains("model.layers.0.input_layernorm.weight")
                ? "model."
                : "";
  const TensorInfo* fc = ck_.find(prefix_ + "fc.weight");
  DFL_CHECK(fc, "drafter '", dir, "' has no '", prefix_, "fc.weight' tensor");
  DFL_CHECK(fc->shape.size() == 2 && fc->shape[1] == int64_t(K) * Ht,
            "drafter fc input width ", fc->shape.size() == 2 ? fc->shape[1] : -1, " does not match ",
            K, " taps x target hidden ", Ht, " = ", int64_t(K) * Ht,
            ": this drafter was not trained for this target");
  fc_ = load_linear(ck_, prefix_ + "fc.weight", H, int64_t(K) * Ht);
  convert_weight(fc_, opts, owned_, &pool);
  hidden_norm_ = load_vector(ck_, prefix_ + "hidden_norm.weight", H);
  final_norm_ = load_vector(ck_, prefix_ + "norm.weight", H);
  for (int32_t il = 0; il < cfg_.n_layers; ++il) {
    const LayerSpec& s = cfg_.layers[il];
    layers_.push_back(load_dense_layer(ck_, str(prefix_, "layers.", il, "."), s, H,
                                       cfg_.intermediate_size, opts, &pool));
    rope_block_.emplace_back(s.rope);
    rope_ctx_.emplace_back(s.rope, d.backbone_rotary_base.value_or(0.0f));
  }
  require_all_used(ck_, cfg_);

  const std::string mpath = mask_embedding_file(dir);
  if (!mpath.empty()) {
    MaskEmbedding me = read_mask_embedding(mpath, H, d.mask_token_id);
    mask_embedding_ = std::move(me.values);
    mask_embedding_path_ = mpath;
  }

  const int32_t slack = std::max(opts.max_block, d.block_size);
  kv_ = KvCache(kv_layout(cfg_), opts.n_seqs, opts.max_context + slack, slack);
}

void DFlashDraftModel::append_context(int32_t seq, const float* taps, int32_t n, int32_t pos0) {
  DFL_CHECK(pos0 == kv_.length(seq), "drafter context at ", pos0, " but cache holds ", kv_.length(seq));
  const int32_t H = cfg_.hidden_size;
  const int64_t in = fc_.n_in;
  const float eps = cfg_.rms_norm_eps;
  const float vs = cfg_.dflash->attention_value_scale;
  // Ring layers take at most `slack` rows per write: chunk the (long) prompt context.
  const int32_t chunk = kv_.slack();
  for (int32_t c0 = 0; c0 < n; c0 += chunk) {
    const int32_t m = std::min(chunk, n - c0);
    c_.resize(size_t(m) * H);
    ops::matmul(taps + size_t(c0) * in, m, fc_, c_.data(), pool_);       // [m, H]
    ops::rms_norm(c_.data(), hidden_norm_.data(), m, H, eps, c_.data());
    const int32_t* pos = sc_.positions(pos0 + c0, m);
    for (int32_t il = 0; il < cfg_.n_layers; ++il) {
      const LayerSpec& s = cfg_.layers[il];
      kbuf_.resize(size_t(m) * s.n_kv_heads * s.head_dim);
      vbuf_.resize(size_t(m) * s.n_kv_heads * s.v_head_dim);
      project_qkv(layers_[il], s, rope_ctx_[il], c_.data(), m, pos, eps, vs, nullptr,
                  kbuf_.data(), vbuf_.data(), sc_, pool_);
      kv_.write(seq, il, pos0 + c0, m, kbuf_.data(), vbuf_.data());
    }
    kv_.commit_length(seq, pos0 + c0 + m);
  }
}

void DFlashDraftModel::draft_block(int32_t seq, const int32_t* tokens, int32_t n, int32_t pos0,
                                   CausalLM& target, float* logits, float* hidden) {
  DFL_CHECK(n >= 2 && n <= kv_.slack(), "draft block of ", n, " tokens (limit ", kv_.slack(), ")");
  DFL_CHECK(pos0 == kv_.length(seq), "draft block at ", pos0, " but context holds ", kv_.length(seq));
  const int32_t H = cfg_.hidden_size;
  const float eps = cfg_.rms_norm_eps;
  x_.resize(size_t(n) * H);
  target.embed(tokens, n, x_.data());
  if (!mask_embedding_.empty()) {
    const int32_t mask = cfg_.dflash->mask_token_id;
    for (int32_t i = 0; i < n; ++i)
      if (tokens[i] == mask) std::copy(mask_embedding_.begin(), mask_embedding_.end(), x_.begin() + size_t(i) * H);
  }
  for (int32_t il = 0; il < cfg_.n_layers; ++il) {
    attention_block(layers_[il], cfg_.layers[il], rope_block_[il], x_.data(), n, pos0, H, eps,
                    cfg_.dflash->attention_value_scale, kv_, seq, il, sc_, pool_);
    mlp_block(layers_[il], x_.data(), n, H, cfg_.intermediate_size, eps, sc_, pool_);
  }
  kv_.truncate(seq, pos0);  // the cache keeps context only
  ops::rms_norm(x_.data(), final_norm_.data(), n, H, eps, x_.data());
  if (hidden) std::copy(x_.begin(), x_.end(), hidden);
  if (logits) target.lm_head(x_.data() + H, n - 1, logits);
}

int64_t DFlashDraftModel::weight_bytes() const {
  int64_t b = dfl::weight_bytes(fc_);
  for (const auto& l : layers_) b += l.matrix_bytes();
  return b;
}

}  // namespace dfl
