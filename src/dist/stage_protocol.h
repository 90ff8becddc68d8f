// What travels between the ranks of a pipeline-parallel job (docs/DISTRIBUTED.md):
//   driver (last rank) → every worker, once per call: a StepCommand — load the stage, attach a
//     KV pool, run a forward (the step's row plan: segments, their tokens, the aux indices, and
//     the sequences to trim / release first: rollbacks and finished requests), or stop;
//   stage s → stage s + 1, once per forward, on the tag of the command's micro-batch group: ONE float message, the residual stream of every
//     row [rows, hidden] then, for each aux index produced by stages ≤ s (aux order), the rows of
//     the segments with taps [tap rows, hidden] — relayed on to the drafter on the last stage.
// Encodings are int32 / float arrays in host byte order (one machine type across the job).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace dfl::dist {

enum class StageOp : int32_t { kLoad = 1, kAttachKv = 2, kForward = 3, kStop = 4 };

// A sequence every worker brings to `length` positions before the forward (0 = release it).
struct SeqTrim {
  int32_t seq = 0;
  int32_t length = 0;
};

struct StepCommand {
  StageOp op = StageOp::kStop;
  // kLoad: the LoadOptions the driver's engine loads with (stage excepted)
  int32_t max_context = 0, max_block = 0;
  int32_t weights_format = 0, prepack = 1, window_edge = -1;  // -1 = not set
  // kAttachKv: the pool's options
  int32_t max_seqs = 0, slack = 0, block_slots = 0;
  int64_t n_blocks = 0;
  int32_t kv_dtype = 0;  // KvDtype (kernels/ops.h): the stages' pools store what the driver's does
  // kForward
  int32_t group = 0;  // the micro-batch group (its activations travel on activation_tag(group))
  std::vector<SeqTrim> trims;
  struct Seg {
    int32_t seq = 0, n = 0, pos0 = 0;
    LogitsMode logits = LogitsMode::kNone;
    bool taps = false;
  };
  std::vector<Seg> segs;
  std::vector<int32_t> aux;     // aux indices (empty: no taps)
  std::vector<int32_t> tokens;  // Σ segs[i].n, in segment order
};

// Micro-batch groups a pipeline may keep in flight (--pp-microbatches), and the tag each
// group's activations travel on: the driver matches a result to its group by it.
constexpr int32_t kMaxGroups = 64;
constexpr int activation_tag(int32_t group) { return 100 + group; }

std::vector<int32_t> encode_command(const StepCommand& c);
// Checks every count and range (a malformed message is a dfl::Error, never a crash).
StepCommand decode_command(const uint8_t* data, size_t bytes);

// The forward a kForward command describes (pointers into `c`, which must outlive it).
ForwardBatch batch_of(const StepCommand& c);

// Positions j in `aux` whose index stages ≤ s produce (what the boundary after stage s carries).
std::vector<int32_t> relayed_columns(const std::vector<StageRange>& stages,
                                     const std::vector<int32_t>& aux, int32_t s);
// Rows of the segments with taps, in order.
int64_t tap_rows(const ForwardBatch& b);

// msg = x [rows, H] then, per column j of `cols`, the tap rows of column j taken from `aux_rows`
// (the BatchOut::aux layout [rows, n_aux, H]).
void pack_activation(const ForwardBatch& b, const float* x, int64_t rows, int32_t H,
                     const std::vector<float>& aux_rows, size_t n_aux,
                     const std::vector<int32_t>& cols, std::vector<float>& msg);
// The inverse for the taps: writes the columns `cols` of msg's tap part into `aux_rows`. Checks
// that msg has exactly the size the plan implies.
void unpack_taps(const ForwardBatch& b, const float* msg, size_t msg_floats, int64_t rows,
                 int32_t H, size_t n_aux, const std::vector<int32_t>& cols,
                 std::vector<float>& aux_rows);

}  // namespace dfl::dist
