// The model-layer interface the engine and the speculative proposers use.
//
// A CausalLM owns its weights (memory-mapped) and runs BATCHED forwards: a ForwardBatch is a list
// of segments, each a run of consecutive new tokens of one sequence (a prefill chunk, a verify
// block, one decode token). Every row goes through each weight matrix once per forward; attention
// runs per segment over that sequence's KV. K/V live in a KvPool (kv/kv_pool.h) that the engine
// builds and attaches (attach_kv); a model loaded on its own makes a default pool.
//
// Taps ("aux" hidden states, the Eagle3/DFlash protocol), per row of a segment with taps:
//   aux index 0   = embedding output (input of layer 0)
//   aux index i   = residual stream h + residual AFTER decoder layer i-1 (pre final norm)
// A DFlash target_layer_id t therefore maps to aux index t + 1 (vLLM's "+1" rule).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/threadpool.h"
#include "kv/kv_pool.h"
#include "model/config.h"

namespace dfl {

enum class LogitsMode : uint8_t { kNone, kLast, kAll };

// One sequence's run of new tokens in a batched forward.
struct SegmentSpec {
  int32_t seq = 0;                  // KV sequence slot
  const int32_t* tokens = nullptr;  // [n]
  int32_t n = 0;
  int32_t pos0 = 0;                 // must equal kv().length(seq)
  LogitsMode logits = LogitsMode::kLast;
  bool taps = false;                // capture the batch's aux rows for this segment
  // With logits: only each logits row's argmax is wanted (a greedy pick, no logprobs): the rows
  // go to BatchOut::argmax instead of BatchOut::logits — the same index ops::argmax gives on
  // them, bit for bit, at less cost where the head allows (CausalLM::lm_head_argmax).
  bool argmax_only = false;
};

struct ForwardBatch {
  std::vector<SegmentSpec> segs;
  const std::vector<int32_t>* aux = nullptr;  // aux indices to capture, in output order
  int32_t group = 0;  // the scheduler's micro-batch group (a pipeline tags its messages with it)
};

struct BatchOut {
  std::vector<float> logits;        // [Σ logits rows, vocab], segments in order (not argmax_only)
  std::vector<int64_t> logits_row;  // per segment: its first logits row
  std::vector<int32_t> argmax;      // [Σ logits rows of argmax_only segments]: each row's argmax
  std::vector<int64_t> argmax_row;  // per segment: its first entry in argmax
  std::vector<float> aux;           // [n_rows, aux.size() × hidden] (zeros for segments w/o taps)
  std::vector<int64_t> row0;        // per segment: its first row
  const float* logits_of(size_t seg, int64_t vocab) const {
    return logits.data() + size_t(logits_row[seg]) * size_t(vocab);
  }
  const int32_t* argmax_of(size_t seg) const { return argmax.data() + argmax_row[seg]; }
  const float* aux_of(size_t seg, int64_t row_width) const {
    return aux.data() + size_t(row0[seg]) * size_t(row_width);
  }
};

// One sequence's forward (the single-segment form; kept for tests and tools).
struct ForwardArgs {
  int32_t seq = 0;
  const int32_t* tokens = nullptr;  // [n]
  int32_t n = 0;
  int32_t pos0 = 0;                 // must equal kv().length(seq)
  LogitsMode logits = LogitsMode::kLast;
  bool argmax_only = false;   // as SegmentSpec: the logits rows' argmax into ForwardOut::argmax
  const std::vector<int32_t>* aux = nullptr;  // aux indices to capture, in output order
};

struct ForwardOut {
  std::vector<float> logits;  // [n_logits, vocab]: n rows (kAll), 1 row (kLast) or none
  std::vector<int32_t> argmax;  // [n_logits] instead, under argmax_only
  std::vector<float> aux;     // [n, aux.size() * hidden]: per token, the captured rows side by side
};

// How the big matrices are held after loading. kAsStored: the stored dtype, read in place from
// the mapping — or, with LoadOptions.prepack, from a copy re-laid out once by prepack_weight()
// when this machine's fastest kernel streams another layout (e.g. AMX tiles for BF16).
// kQ8: each Linear weight (and the lm_head) is quantized once at load time to the int8
// per-block format of kernels/ops.h (kPackedQ8, ~1.06 bytes per weight); norms stay fp32 and the
// embedding rows are still read from the stored table.
enum class WeightsFormat : uint8_t { kAsStored, kQ8 };

// A pipeline stage (dist/, docs/DISTRIBUTED.md): the decoder layers [begin, end) this process
// holds (end < 0 = through the last). The stage holding layer 0 embeds; the one holding the
// last layer also holds the final norm and lm_head. Other layers' tensors are not loaded and get
// no KV.
struct StageRange {
  int32_t begin = 0;
  int32_t end = -1;
};

struct LoadOptions {
  int32_t max_context = 4096;  // positions a sequence may hold (default pool)
  int32_t n_seqs = 1;          // sequences held side by side (default pool)
  int32_t max_block = 16;      // most tokens appended/rolled back at once (ring slack)
  KvDtype kv_dtype = KvDtype::kF32;  // element type of the default pool (kv/kv_pool.h)
  WeightsFormat weights_format = WeightsFormat::kAsStored;
  bool prepack = true;  // kAsStored: use prepack_weight()'s layout where the machine has one
  ConfigOptions config;  // parse-time choices (model/config.h)
  StageRange stage;      // the layers to hold (default: all)
};

// The KV layout of a model: one entry per attention layer in [begin, end) (end < 0 = all), by
// the kv/kv_pool.h kv_layer_spec rule.
std::vector<KvLayerSpec> kv_layout(const ModelConfig& cfg, int32_t begin = 0, int32_t end = -1);

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  // The attached KV pool.
  virtual KvPool& kv() = 0;
  // Uses `pool` (built for kv_layout(config())) from now on; the model does not own it.
  // A model with recurrent layers (re)sizes its recurrent states to the pool's slots here.
  virtual void attach_kv(KvPool* pool) = 0;
  // The KV layout of the layers this model holds (all of them unless it is a pipeline stage):
  // what a pool given to attach_kv must be built for.
  virtual std::vector<KvLayerSpec> kv_layers() const { return kv_layout(config()); }
  // Rolls sequence `seq` back to its first n positions (n ≤ its length, within the last
  // forward for recurrent layers): every layer-state kind (KV, recurrent) afterwards equals the
  // state of having run those n positions only. The engine's one rollback call.
  virtual void rollback(int32_t seq, int32_t n) { kv().truncate(seq, n); }
  // Forgets sequence `seq` in every layer-state kind (its slot is free for another sequence).
  virtual void release(int32_t seq) { kv().clear(seq); }
  // Largest context the model allows (min of max_position_embeddings and what was asked).
  virtual int32_t max_context() const = 0;
  // Runs a batched forward (see file comment). Makes room in the pool for every segment
  // (dfl::Error when the pool is out of pages or a sequence would overflow the context).
  virtual void forward(const ForwardBatch& batch, BatchOut& out) = 0;
  // The same pass split in two, so a pipeline can keep several in flight (micro-batches across
  // requests, docs/DISTRIBUTED.md): forward_begin starts it (the batch and what it points to
  // must stay unchanged until its forward_end), forward_end finishes the OLDEST begun pass, which
  // must be `batch`. Passes end in the order they began; their segments are disjoint sequences.
  // Without a pipeline, begin does nothing and end is forward().
  virtual void forward_begin(const ForwardBatch& batch) { (void)batch; }
  virtual void forward_end(const ForwardBatch& batch, BatchOut& out) { forward(batch, out); }
  // One sequence (any length: split into ring-safe chunks when the model has sliding layers).
  void forward(const ForwardArgs& args, ForwardOut& out);
  // Embedding rows (scaled as the family's forward does): out [n, hidden].
  virtual void embed(const int32_t* tokens, int64_t n, float* out) const = 0;
  // Final norm then lm_head: x [n, hidden] (residual stream) → logits [n, vocab].
  virtual void norm_and_lm_head(const float* x, int64_t n, float* logits) = 0;
  // lm_head only: x [n, hidden] (already normed) → logits [n, vocab] (final soft-cap included).
  virtual void lm_head(const float* x_normed, int64_t n, float* logits) = 0;
  // Greedy picks: out[i] = ops::argmax of row i of lm_head(x_normed) — that index, bit for bit,
  // computed without the logits where the head allows (ops::matmul_argmax). This default runs
  // lm_head.
  virtual void lm_head_argmax(const float* x_normed, int64_t n, int32_t* out);
  // Bytes of weights one decode step reads (for roofline figures): everything but the output
  // head, the head's weights, and the greedy screen's plane (0: the head has none), which a step
  // that takes lm_head_argmax streams instead of the weights while the screen runs.
  struct StepBytes {
    int64_t body = 0, head = 0, head_plane = 0;
  };
  virtual StepBytes weight_bytes_per_step() const = 0;
  // body + the head as a step reads it; greedy_picks: through lm_head_argmax (its plane if any).
  int64_t weight_bytes_per_token(bool greedy_picks) const {
    const StepBytes b = weight_bytes_per_step();
    return b.body + (greedy_picks && b.head_plane > 0 ? b.head_plane : b.head);
  }

 private:
  BatchOut one_seq_out_;  // forward(ForwardArgs): reused, so no per-call zero-fill of logits
};

// Loads a target checkpoint folder (config.json + safetensors), dispatching on the architecture
// (model/registry.h). The model gets a default pool of opts.n_seqs × opts.max_context.
std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir, const LoadOptions& opts,
                                         ThreadPool& pool);

// A pool for `cfg` with the given limits (ring slack ≥ slack).
std::unique_ptr<KvPool> make_kv_pool(const ModelConfig& cfg, const KvPoolOptions& opts);

}  // namespace dfl
