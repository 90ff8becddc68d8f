// Pipeline-parallel target over MPI ranks (docs/DISTRIBUTED.md). Rank r of N holds the stage
// plan's contiguous layers stages[r] (only their tensors, only their KV). The LAST rank is the
// driver: it holds the final norm, lm_head, sampling, the drafter and the engine (scheduler,
// tokenizer, server), because everything after the target's forward needs the logits and the
// taps, which end there; the per-step traffic is then one command down to the workers and the
// activation relay up the chain (vLLM keeps the drafter on the last stage for the same reason).
//
// PipelineLM is the CausalLM the driver's engine sees: forward() sends the step's row plan (with
// the rollbacks / releases since the last step) to every worker, receives the residual stream
// and the relayed taps from the previous stage, runs its own layers and lm_head, and returns a
// BatchOut exactly as a whole-model forward would (same kernels on the same rows: bit-identical).
// Verify blocks, prefill chunks and batched segments are all segments of that one forward.
//
// run_stage_worker() is what ranks 0..N-2 run instead of a command: load, then execute the
// driver's commands until it stops (or aborts the job).
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/stage_protocol.h"
#include "model/decoder.h"
#include "model/model.h"

namespace dfl::dist {

struct PipelineOptions {
  int32_t n_stages = 1;
  std::string layer_counts;  // --pp-layers "a,b,...", empty = split by weight bytes
  double timeout_s = 120;    // longest wait for a peer inside a step (--pp-timeout)
};

// The stage plan of a model folder for n stages (every rank computes the same one).
std::vector<StageRange> plan_stages(const std::string& model_dir, const ConfigOptions& co,
                                    const PipelineOptions& po);

class PipelineLM final : public CausalLM {
 public:
  // `stage` is the driver's own DecoderLM (stages.back()). Sends kLoad with `lo` first.
  PipelineLM(std::unique_ptr<CausalLM> stage, std::vector<StageRange> stages, Communicator& comm,
             double timeout_s);
  ~PipelineLM() override;  // stops the workers and prints the traffic summary (stderr)

  const ModelConfig& config() const override { return stage_->config(); }
  KvPool& kv() override { return stage_->kv(); }
  std::vector<KvLayerSpec> kv_layers() const override { return stage_->kv_layers(); }
  void attach_kv(KvPool* pool) override;
  void rollback(int32_t seq, int32_t n) override;
  void release(int32_t seq) override;
  int32_t max_context() const override { return stage_->max_context(); }
  void forward(const ForwardBatch& batch, BatchOut& out) override;
  // Micro-batching: begin sends the command (the workers start at once), end receives the
  // activation of the oldest begun pass (on its group's tag) and runs the last stage.
  void forward_begin(const ForwardBatch& batch) override;
  void forward_end(const ForwardBatch& batch, BatchOut& out) override;
  void embed(const int32_t* tokens, int64_t n, float* out) const override { stage_->embed(tokens, n, out); }
  void norm_and_lm_head(const float* x, int64_t n, float* logits) override {
    stage_->norm_and_lm_head(x, n, logits);
  }
  void lm_head(const float* x_normed, int64_t n, float* logits) override { stage_->lm_head(x_normed, n, logits); }
  void lm_head_argmax(const float* x_normed, int64_t n, int32_t* out) override {
    stage_->lm_head_argmax(x_normed, n, out);
  }
  StepBytes weight_bytes_per_step() const override;

 private:
  void send_all(const StepCommand& c);
  void begin_all(const ForwardBatch& batch);
  void end_all(const ForwardBatch& batch, BatchOut& out);

  std::unique_ptr<CausalLM> owned_;
  DecoderLM* stage_;
  std::vector<StageRange> stages_;
  Communicator& comm_;
  double timeout_s_;
  std::vector<int32_t> remote_len_;  // per slot: the length the workers hold
  std::vector<SeqTrim> trims_;       // rollbacks / releases not sent yet
  std::vector<uint8_t> rx_;
  struct InFlight {
    int32_t group = 0;
    int64_t rows = 0;
  };
  std::deque<InFlight> in_flight_;   // begun passes, oldest first
  int64_t steps_ = 0, rows_ = 0, max_in_flight_ = 0;
  double busy_s_ = 0, t_start_ = 0;
};

// EngineOptions::load_target for the driver: tells the workers to load (kLoad), loads the last
// stage here, returns the PipelineLM over it.
std::function<std::unique_ptr<CausalLM>(const std::string&, const LoadOptions&, ThreadPool&)>
pipeline_loader(std::vector<StageRange> stages, Communicator& comm, double timeout_s);

// Ranks 0..N-2: waits for kLoad, loads stages[rank] of model_dir with `threads` threads, then
// runs the driver's commands until kStop. Returns normally only after kStop.
void run_stage_worker(const std::string& model_dir, const ConfigOptions& co,
                      const std::vector<StageRange>& stages, Communicator& comm, int32_t threads,
                      double timeout_s);

}  // namespace dfl::dist
