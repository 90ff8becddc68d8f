// The model-layer interface the engine and the speculative proposers use.
//
// A CausalLM owns its weights (memory-mapped) and its KV cache, and runs one sequence's tokens at
// a time: forward() appends K/V for positions [pos0, pos0 + n) of sequence `seq` and returns
// logits and, on request, "aux" hidden states (the Eagle3/DFlash tap protocol):
//   aux index 0   = embedding output (input of layer 0)
//   aux index i   = residual stream h + residual AFTER decoder layer i-1 (pre final norm)
// A DFlash target_layer_id t therefore maps to aux index t + 1 (vLLM's "+1" rule).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/threadpool.h"
#include "kv/kv_cache.h"
#include "model/config.h"

namespace dfl {

enum class LogitsMode : uint8_t { kNone, kLast, kAll };

struct ForwardArgs {
  int32_t seq = 0;
  const int32_t* tokens = nullptr;  // [n]
  int32_t n = 0;
  int32_t pos0 = 0;                 // must equal kv().length(seq)
  LogitsMode logits = LogitsMode::kLast;
  const std::vector<int32_t>* aux = nullptr;  // aux indices to capture, in output order
};

struct ForwardOut {
  std::vector<float> logits;  // [n_logits, vocab]: n rows (kAll), 1 row (kLast) or none
  std::vector<float> aux;     // [n, aux.size() * hidden]: per token, the captured rows side by side
};

// How the big matrices are held after loading. kAsStored: the stored dtype, read in place from
// the mapping — or, with LoadOptions.prepack, from a copy re-laid out once by prepack_weight()
// when this machine's fastest kernel streams another layout (e.g. AMX tiles for BF16).
// kQ8: each Linear weight (and the lm_head) is quantized once at load time to the int8
// per-block format of kernels/ops.h (kPackedQ8, ~1.06 bytes per weight); norms stay fp32 and the
// embedding rows are still read from the stored table.
enum class WeightsFormat : uint8_t { kAsStored, kQ8 };

struct LoadOptions {
  int32_t max_context = 4096;  // positions a sequence may hold
  int32_t n_seqs = 1;          // sequences held side by side in the KV cache
  int32_t max_block = 16;      // most tokens appended/rolled back at once after prefill
  WeightsFormat weights_format = WeightsFormat::kAsStored;
  bool prepack = true;  // kAsStored: use prepack_weight()'s layout where the machine has one
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  virtual KvCache& kv() = 0;
  // Runs a forward pass (see file comment). Throws dfl::Error if the context would overflow.
  virtual void forward(const ForwardArgs& args, ForwardOut& out) = 0;
  // Embedding rows: out [n, hidden].
  virtual void embed(const int32_t* tokens, int64_t n, float* out) const = 0;
  // Final norm then lm_head: x [n, hidden] (residual stream) → logits [n, vocab].
  virtual void norm_and_lm_head(const float* x, int64_t n, float* logits) = 0;
  // lm_head only: x [n, hidden] (already normed) → logits [n, vocab].
  virtual void lm_head(const float* x_normed, int64_t n, float* logits) = 0;
  // Bytes of weights one decode step reads (for roofline figures).
  virtual int64_t weight_bytes_per_token() const = 0;
};

// KV layout of a model: one entry per layer; sliding layers keep a ring of their window
// (+ slack), full layers keep everything. The one place this rule is written.
std::vector<KvLayerSpec> kv_layout(const ModelConfig& cfg);

// Loads a target checkpoint folder (config.json + safetensors), dispatching on the architecture.
std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir, const LoadOptions& opts,
                                         ThreadPool& pool);

}  // namespace dfl
