// The one decoder skeleton every target family runs on: embedding → L × (attention sublayer →
// FFN sublayer) → final norm → lm_head, over the ragged segments of a ForwardBatch. The token
// mixer of a layer is attention (over the KV pool) or Gated DeltaNet (over the recurrent states,
// kv/recurrent_state.h), per DecoderLayer::mixer; everything else is shared. A family
// file only loads its weights into `head_` and `layers_` (any projection layout, any FFN kind)
// and calls finish_load(); the forward, the taps, the KV handling and the logits are here.
//
// One forward: validate segments and make room in the pool → build the step plan (positions and
// each distinct RoPE table once) → embed every row → per layer: attention (K/V written per
// segment, attention over each segment's KV view), FFN, taps → commit lengths → the rows that
// want logits go through final norm + lm_head in one matmul.
//
// Pipeline stages (LoadOptions.stage, dist/): a DecoderLM may hold only the layers [begin, end);
// forward_stage() then runs just those, from the previous stage's residual stream, and leaves
// its own for the next stage in stage_output(); the taps it produces are the aux indices of its
// layers (index 0 on the stage that embeds); only the stage with the last layer makes logits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention/step_plan.h"
#include "io/checkpoint.h"
#include "kv/recurrent_state.h"
#include "model/blocks.h"
#include "model/model.h"

namespace dfl {

// The checkpoint a config was read from: its safetensors folder, or its GGUF file with the
// family's tensor names mapped to the HF ones.
std::unique_ptr<Checkpoint> open_checkpoint(const ModelConfig& cfg);
// The decoder layer an HF-style tensor name belongs to ("...layers.<i>.<rest>", the "layers."
// at the start or after a '.'), or -1 (embedding, head, MTP layers "mtp." / ".mtp.", ...).
int32_t decoder_layer_of(const std::string& tensor_name);
// A tensor of a multi-token-prediction head ("mtp." / ".mtp."): no target loads them.
bool is_mtp_tensor(const std::string& tensor_name);

class DecoderLM : public CausalLM {
 public:
  const ModelConfig& config() const override { return cfg_; }
  KvPool& kv() override { return *kv_; }
  void attach_kv(KvPool* pool) override;
  void rollback(int32_t seq, int32_t n) override;
  void release(int32_t seq) override;
  // The recurrent states (null without Gated DeltaNet layers).
  const RecurrentState* recurrent() const { return rec_.get(); }
  int32_t max_context() const override { return max_context_; }
  void forward(const ForwardBatch& batch, BatchOut& out) override;
  void embed(const int32_t* tokens, int64_t n, float* out) const override;
  void norm_and_lm_head(const float* x, int64_t n, float* logits) override;
  void lm_head(const float* x_normed, int64_t n, float* logits) override;
  void lm_head_argmax(const float* x_normed, int64_t n, int32_t* out) override;
  StepBytes weight_bytes_per_step() const override;
  std::vector<KvLayerSpec> kv_layers() const override { return kv_layout(cfg_, begin_, end_); }

  // The stage's layer range [layer_begin, layer_end) (everything for a whole model).
  int32_t layer_begin() const { return begin_; }
  int32_t layer_end() const { return end_; }
  bool embeds() const { return begin_ == 0; }
  bool has_head() const { return end_ == cfg_.n_layers; }
  // The batched forward of this stage's layers. x_in [rows, hidden] is the residual stream
  // entering layer_begin() (rows of the segments in order), or null on the stage that embeds.
  // out gets row0 / logits_row, the taps of this stage's aux indices in out.aux (zeros for the
  // others), and logits only when has_head(). KV lengths are committed as in forward().
  void forward_stage(const ForwardBatch& batch, const float* x_in, BatchOut& out);
  // The residual stream after layer_end() - 1 of the last forward_stage, [rows, hidden].
  const float* stage_output() const { return x_.data(); }

 protected:
  DecoderLM(ModelConfig cfg, ThreadPool& pool);
  // After the family loaded head_ and layers_: RoPE tables interned per layer, attention
  // parameters bound, the lm_head converted to the load-time format, leftover tensors refused
  // (`ignore` prefixes excepted), and a default pool of opts.n_seqs × opts.max_context made.
  void finish_load(const LoadOptions& opts, const std::vector<std::string>& ignore = {});
  // Fills layers_: load(il) for the layers of opts.stage, a placeholder (mixer kind only) for
  // the others, whose tensors are then left unread. Every family loads its layers through it.
  template <class LoadLayer>
  void load_layers(const LoadOptions& opts, LoadLayer&& load) {
    set_stage(opts.stage);
    for (int32_t il = 0; il < cfg_.n_layers; ++il) {
      if (il >= begin_ && il < end_) {
        layers_.push_back(load(il));
      } else {
        layers_.emplace_back();
        layers_.back().mixer = cfg_.layers[il].mixer;
      }
    }
  }

  ModelConfig cfg_;
  std::unique_ptr<Checkpoint> ck_owned_;  // safetensors folder, or the GGUF file (HF names)
  Checkpoint& ck_;
  ThreadPool& pool_;
  OutputHead head_;
  OwnedWeights owned_;  // load-time copy of the lm_head (Q8 / prepacked), if any
  std::vector<DecoderLayer> layers_;

 private:
  void set_stage(const StageRange& r);
  void capture_taps(const ForwardBatch& b, int32_t index, BatchOut& out) const;
  void rollback_recurrent(int32_t seq, int32_t n);

  std::vector<int32_t> kv_layer_;  // per layer: its KvPool layer (attention) or -1
  std::unique_ptr<RecurrentState> rec_;
  int32_t rec_block_ = 16;
  int32_t begin_ = 0, end_ = -1;  // the stage's layers (end_ = -1 until load_layers)  // rows a recurrent forward keeps for a partial rollback

  std::vector<RopeTable> ropes_;  // distinct tables; AttnWeights::rope indexes them
  int32_t max_context_ = 0;
  std::unique_ptr<KvPool> own_kv_;
  KvPool* kv_ = nullptr;
  StepPlan plan_;
  Scratch sc_;
  std::vector<PlanSegment> psegs_;
  std::vector<float> x_, xl_, head_tmp_;
};

}  // namespace dfl
