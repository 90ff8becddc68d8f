// The DFlash block-diffusion drafter (z-lab DFlashDraftModel and the MiMo layout), batched.
//
// It has no embedding of its own and, unless its vocabulary is reduced (below), no lm_head: both
// are borrowed from the target. Target features condition it by KV injection:
//   c[p]  = hidden_norm(fc(concat_k taps_k[p]))                                 [S, H]
//   every layer ℓ: K_ctx = RoPE(k_norm(c W_k)), V_ctx = (c W_v) · value_scale   (no input norm;
//   RoPE base = backbone_rotary_base when the config sets it, else rope_theta)
// and those context K/V live in the drafter's KV pool across steps (one sequence slot per
// request, the same slot as in the target's pool).
// A reduced-vocabulary drafter (speculators `draft_vocab_size` < vocab) brings its own lm_head
// [draft_vocab, H] after the same final norm, and `d2t` maps its ids back to target ids.
// A draft pass runs the block [anchor, MASK × (B−1)] at positions s..s+B−1 through every layer
// (the shared attention and FFN sublayers of model/blocks.h), with queries only from the block and
// keys = cached context ++ block, masked by each layer's resolved window (non-causal layers see
// the whole block), then final norm and the target's lm_head (or the drafter's own); block row j
// predicts the token at position s+j (no shift). The block's K/V are dropped afterwards (truncated back to s), so the
// pool holds context only.
//
// run() does both for many sequences in ONE pass: first every job's new context rows (one fc
// matmul and one K/V projection per layer over all of them), then every job's block (one
// forward over all blocks, one lm_head matmul over all drafted rows). Every op is row-invariant,
// so a job's drafts do not depend on what else is in the batch.
//
// DFlash2 drafters (model/dflash2_draft.h) are this class with a DFlash2Parts: its convolutions
// wrap every block sublayer; its candidate selector is applied by the proposer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attention/step_plan.h"
#include "core/threadpool.h"
#include "io/checkpoint.h"
#include "kv/kv_pool.h"
#include "model/blocks.h"
#include "model/config.h"
#include "model/dflash2_draft.h"
#include "model/model.h"

namespace dfl {

// The drafter's optional MASK-embedding sidecar: `dir`/mask_embedding.pt when that file exists,
// else "" (the one place its name and location are written).
std::string mask_embedding_file(const std::string& dir);

// One sequence's share of a drafter pass.
struct DraftJob {
  int32_t seq = 0;
  const float* ctx_taps = nullptr;  // [n_ctx, K·H_target] new context features (may be 0 rows)
  int32_t n_ctx = 0;
  const int32_t* block = nullptr;   // [n_block] anchor + MASKs, at positions kv().length(seq)
  int32_t n_block = 0;              // after the context is appended; 0 = append only
};

class DFlashDraftModel {
 public:
  // Loads `dir` (config.json, safetensors in z-lab or MiMo layout, optional mask_embedding.pt)
  // for use with `target`. Refuses a drafter whose fc input width ≠ taps × target hidden, whose
  // hidden size differs from the target's, or whose taps name layers the target lacks.
  // Makes a default pool of opts.n_seqs × opts.max_context (+ block) positions.
  DFlashDraftModel(const std::string& dir, const CausalLM& target, const LoadOptions& opts,
                   ThreadPool& pool);

  const ModelConfig& config() const { return cfg_; }
  const DFlashSpec& dflash() const { return *cfg_.dflash; }
  KvPool& kv() { return *kv_; }
  ThreadPool& pool() { return pool_; }
  void attach_kv(KvPool* pool) { kv_ = pool; }
  // Target aux indices to capture, in fc input order (target_layer_id + 1 each).
  const std::vector<int32_t>& target_aux_indices() const { return aux_; }
  bool has_mask_embedding() const { return !mask_embedding_.empty(); }
  const std::string& mask_embedding_path() const { return mask_embedding_path_; }
  // DFlash2's convolutions (applied inside run()) and candidate selector (used by the proposer);
  // null for a plain DFlash drafter.
  const DFlash2Parts* dflash2() const { return v2_.get(); }

  // Reduced-vocabulary drafters (DFlashSpec::reduced_vocab, docs/DFLASH.md): the drafter's own
  // lm_head [draft_vocab, H] replaces the target's, and draft id i is target id
  // draft_to_target()[i]. Otherwise the map is empty and logits are over the target vocabulary.
  bool own_head() const { return !draft_to_target_.empty(); }
  int64_t out_vocab() const;
  const std::vector<int32_t>& draft_to_target() const { return draft_to_target_; }

  // Runs the jobs (file comment). logits: for each job with a block, its rows 1..n_block−1 (rows
  // 0..n_block−2 for a sample_from_anchor drafter: row j predicts s + j + 1) in job order → [Σ (n_block − 1), out_vocab()] (draft ids when own_head()). `hidden` (optional): the final-normed rows of every block
  // [Σ n_block, H]. `picks` (optional): instead of the logits, each of those rows' argmax (greedy
  // drafts; the head's screen skips most of the work, ops::matmul_argmax), logits left empty.
  // Throws dfl::Error when the pool is out of pages.
  void run(const std::vector<DraftJob>& jobs, CausalLM& target, std::vector<float>& logits,
           std::vector<float>* hidden = nullptr, std::vector<int32_t>* picks = nullptr);

  // Single-sequence forms (tests, tools).
  void append_context(int32_t seq, const float* taps, int32_t n, int32_t pos0);
  void draft_block(int32_t seq, const int32_t* tokens, int32_t n, int32_t pos0, CausalLM& target,
                   float* logits, float* hidden = nullptr);

  int64_t weight_bytes() const;

 private:
  // lm_head.weight [Vd, H], d2t (i64/i32 [Vd]) and the optional t2d (bool [vocab]), checked.
  void load_draft_vocab(const std::string& dir, const CausalLM& target, const LoadOptions& opts);
  void prepare(const std::vector<DraftJob>& jobs);  // checks + room in the pool
  void append_contexts(const std::vector<DraftJob>& jobs);
  void draft_blocks(const std::vector<DraftJob>& jobs, CausalLM& target, std::vector<float>& logits,
                    std::vector<float>* hidden, std::vector<int32_t>* picks);

  ModelConfig cfg_;
  std::unique_ptr<Checkpoint> ck_owned_;  // safetensors folder or GGUF file (z-lab names)
  Checkpoint& ck_;
  ThreadPool& pool_;
  std::string prefix_;                 // "" (z-lab) or "model."
  WeightMatrix fc_;                    // [H, K·H_t]
  OwnedWeights owned_;                 // load-time copy of fc (Q8 / prepacked), if any
  std::vector<float> hidden_norm_, final_norm_;
  OutputHead head_;                    // own reduced-vocabulary lm_head (only lm_head/vocab/hidden set)
  std::vector<int32_t> draft_to_target_;  // [draft_vocab] target ids, or empty
  int64_t target_vocab_ = 0;
  std::vector<DecoderLayer> layers_;   // attn.rope indexes ropes_ (block positions)
  std::vector<int32_t> ctx_rope_;      // per layer: its context-key table in ropes_
  std::vector<RopeTable> ropes_;
  std::vector<float> mask_embedding_;  // [H] or empty
  std::string mask_embedding_path_;
  std::vector<int32_t> aux_;
  std::unique_ptr<DFlash2Parts> v2_;   // DFlash2 drafters only
  std::unique_ptr<KvPool> own_kv_;
  KvPool* kv_ = nullptr;
  StepPlan plan_;
  Scratch sc_;
  std::vector<PlanSegment> psegs_;
  std::vector<float> taps_, c_, x_, xl_, k_, v_;
  std::vector<int32_t> tokens_;
};

}  // namespace dfl
