// The batched step loop (vLLM's scheduler + model runner, token level): admission, chunked
// prefill under a per-step token budget, one batched target forward and one batched proposer
// pass per step, verification, commit / rollback, preemption when the KV pool runs out.
//
// A step:
//   1. admit waiting sequences FIFO while a slot is free and both pools hold their prompt;
//   2. plan rows: every decoding sequence contributes its verify block [anchor, drafts…] (or the
//      anchor alone), then prefill chunks are added in admission order while they fit the token
//      budget (at least one chunk per step, so prefill always progresses). A prompt is always cut
//      at the same places — multiples of prefill_chunk from 0 — whatever shares the step, so its
//      numbers never depend on the schedule (the prefill-attention exception of
//      kernels/ops.h sees the same call sizes alone and in a batch);
//   3. make room in both pools for every planned row; when a pool is out of pages, preempt the
//      most recently admitted sequence (free everything, requeue it at the front; it recomputes
//      later: its prompt with the same chunk cuts, its generated tokens in chunks below the prefill
//      attention threshold, as they were computed the first time), and plan again;
//   4. one proposer pass: every speculating sequence appends the target features of the
//      positions committed last step and drafts its block;
//   5. one target forward over all segments, with taps for speculating sequences;
//   6. per sequence: verify (greedy prefix or rejection sampling with its own RNG), commit,
//      truncate its KV to the accepted prefix, report tokens; finish on stop ids, max tokens,
//      the context limit or a callback asking to stop; free its slot.
// With SchedulerOptions::groups = G > 1 these steps run per micro-batch group (its sequences
// only), and step() begins every group not in flight (1-5, ending in forward_begin), then ends
// the oldest one in flight (forward_end, 6): up to G target forwards are under way at once.
// At T = 0 a sequence's tokens are bit-identical to running it alone (all ops are row-invariant
// and its prefill cuts are fixed); at T > 0 with a seed, identical to running alone with that
// seed for a fixed block size (auto block sizes follow measured timings, so their draft lengths —
// and with them the RNG draws — may differ from run to run; T = 0 output never does).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/block_policy.h"
#include "engine/request.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "spec/proposer.h"

namespace dfl {

// A request at the token level.
struct SeqRequest {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;   // generation ends after emitting one of these
  bool speculative = true;         // use the proposer (when there is one)
  int32_t block_size = 0;          // verify rows incl. the anchor; 0 = the proposer's; kBlockAuto
  bool want_logits = false;        // pass the target's logits row of each committed token
  bool trace = false;              // keep per-cycle drafts and accepted counts
};

// What a sequence's callback hears: newly committed tokens (and their target logits rows when
// asked), and once, finished = true. Return false to stop the sequence (it finishes as kStop).
struct SeqEvent {
  RequestId id = 0;
  const int32_t* tokens = nullptr;
  int32_t n = 0;
  const float* logits = nullptr;   // [n, vocab] when want_logits
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  const RequestStats* stats = nullptr;
  const std::vector<CycleTrace>* trace = nullptr;
};
using SeqCallback = std::function<bool(const SeqEvent&)>;

struct SchedulerOptions {
  int32_t max_seqs = 16;           // ≤ the pools' slots
  int32_t max_batch_tokens = 512;  // planned rows per step (chunked prefill budget)
  int32_t prefill_chunk = 256;     // prompt cut size (≤ the pools' ring slack)
  int32_t default_block = 0;       // 0 = the proposer's block; kBlockAuto
  // The target forward's cost over total rows, t(R) (measure_verify_curve): auto draft lengths
  // are chosen from it per step with the whole batch in view (choose_batch_draft_lengths).
  std::vector<double> verify_cost;
  std::vector<double> draft_cost;  // the proposer pass over total drafter rows (measure_draft_curve)
  // Micro-batch groups (pipeline parallelism, docs/DISTRIBUTED.md): the running sequences are
  // dealt into this many groups at admission (least-loaded group) and stay there; each group is
  // planned, forwarded, verified and committed on its own, and up to `groups` forwards are in
  // flight at once (CausalLM::forward_begin / forward_end), so pipeline stages overlap. A group's
  // next step is planned only after its previous one was committed. 1 = one step at a time.
  int32_t groups = 1;
};

class Scheduler {
 public:
  // `proposer` may be null (target-only). The target's pool (and the proposer's) must have at
  // least opts.max_seqs slots and a ring slack ≥ max(prefill_chunk, block).
  Scheduler(CausalLM& target, Proposer* proposer, const SchedulerOptions& opts);
  ~Scheduler();

  RequestId submit(SeqRequest req, SeqCallback cb);
  void cancel(RequestId id);
  // One step (see the file comment); false when there was nothing to do.
  bool step();
  bool idle() const;
  int32_t running() const;
  int32_t waiting() const;

  int64_t steps() const { return steps_; }
  int64_t preemptions() const { return preemptions_; }

 private:
  struct Seq;
  // One micro-batch group's step buffers (reused) and whether its forward is in flight.
  struct Group {
    std::vector<Seq*> batch;  // the step's sequences, in segment order
    ForwardBatch fb;
    BatchOut bo;
    bool in_flight = false;
    std::chrono::steady_clock::time_point t_fwd;
  };
  enum class Launch { kIdle, kNothing, kBegun };
  // Steps 1-5 for group g up to the forward's start; complete(g): the forward's end and step 6.
  Launch launch(int32_t g);
  void complete(int32_t g);
  bool plan_and_reserve(int32_t g, std::vector<Seq*>& batch);
  void preempt(Seq* victim);
  void admit(int32_t g);
  void finish(Seq* s, FinishReason why);
  bool emit(Seq* s, const int32_t* toks, int32_t n, const float* logits);
  void release_slot(Seq* s);

  CausalLM& target_;
  Proposer* proposer_;
  SchedulerOptions opts_;
  int32_t vocab_ = 0, hidden_ = 0, max_ctx_ = 0;
  RequestId next_id_ = 1;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;   // admission order
  std::vector<int32_t> free_slots_;
  int64_t steps_ = 0, preemptions_ = 0;
  std::vector<Group> groups_;
  std::deque<int32_t> in_flight_;  // groups whose forward was begun, oldest first
  // Per-step buffers (reused).
  std::vector<ProposeJob> jobs_;
  std::vector<float> scratch_;
  std::vector<Seq*> auto_seqs_;  // per-step scratch of plan_and_reserve
  std::vector<int32_t> auto_caps_, auto_len_;
  std::vector<const BlockPolicy*> auto_pol_;
};

}  // namespace dfl
