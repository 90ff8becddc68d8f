// The engine: owns the whole pipeline (target, drafter and proposer, tokenizer, chat template,
// stop ids, block-policy calibration, the KV pools and the scheduler) and serves many requests at
// once. `dflash run`, `dflash bench` and `dflash serve` are thin clients of it.
//
// Threading: an Engine is used from ONE thread (the engine thread): submit, step, cancel and the
// accessors. Callbacks of requests run on that thread too. A server keeps its own queue between
// its HTTP threads and the engine thread.
//
// One step = one batched target forward over ragged segments (prefill chunks of newly admitted
// requests, verify blocks of speculating requests, single tokens of the others) + one batched
// drafter pass for every speculating request (with microbatches G > 1: of one group of requests,
// up to G groups' forwards in flight; scheduler.h). At temperature 0 every request's tokens are
// bit-identical to running it alone; at T > 0 with a seed, identical to running alone with that
// seed (each request has its own RNG stream).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "model/model.h"
#include "spec/proposer.h"

namespace dfl {

class Tokenizer;
struct ChatTemplate;

struct EngineOptions {
  std::string model_dir;            // target checkpoint folder (or a .gguf file)
  std::string draft_dir;            // DFlash drafter folder, or "ngram[:N]" (prompt lookup);
                                    // empty = target-only
  WeightsFormat weights_format = WeightsFormat::kAsStored;
  bool prepack = true;
  ConfigOptions config;             // parse-time choices (e.g. the MiMo window edge)
  int32_t threads = 0;              // 0 = all cores
  int32_t max_context = 4096;       // positions one sequence may hold (clamped to the model's)
  int32_t max_seqs = 16;            // sequences running at once
  int64_t kv_memory_bytes = 0;      // KV budget (attention pages + per-slot rings and recurrent
                                    // states); 0 = enough for max_seqs × max_context
  KvDtype kv_dtype = KvDtype::kF32;  // K/V element type of the target's and drafter's pools
                                    // (--kv-dtype; bf16 halves the bytes, kv/kv_pool.h)
  int32_t max_batch_tokens = 512;   // rows per target forward (chunked prefill budget)
  int32_t max_queue = 4096;         // waiting requests before submit refuses (kQueueFull)
  int32_t default_block_size = kBlockDefault;  // kBlockDefault = the drafter's, or kBlockAuto
  bool calibrate = true;            // measure the verify cost curve at start (for kBlockAuto)
  bool default_enable_thinking = false;
  int32_t microbatches = 1;         // scheduler groups kept in flight (SchedulerOptions::groups)  // chat default (DFlash drafters train thinking-off)
  // Bench and test hook: given the engine's proposer (null without a drafter), returns the one
  // to use instead (owned by the caller; it may wrap the real one), or nullptr to keep it.
  std::function<Proposer*(Proposer* real)> wrap_proposer;
  // Loads the target instead of load_causal_lm (e.g. the last stage of a pipeline-parallel job,
  // dist/pipeline_lm.h); null = load_causal_lm.
  std::function<std::unique_ptr<CausalLM>(const std::string& dir, const LoadOptions& lo, ThreadPool& pool)>
      load_target;
};

// Aggregates for metrics (Prometheus) and progress lines.
struct EngineMetrics {
  int32_t running = 0, waiting = 0;
  double kv_usage = 0;               // fraction of the KV budget in use, [0, 1]
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  int64_t spec_drafts_total = 0, spec_draft_tokens_total = 0, spec_accepted_tokens_total = 0;
  std::vector<int64_t> spec_accepted_per_pos_total;
  int64_t preemptions_total = 0;
  int64_t steps_total = 0;
};

struct ModelInfo {
  std::string name;                 // folder name of the target
  int32_t vocab_size = 0;
  int32_t max_context = 0;          // what a request may use (prompt + generated)
  bool has_drafter = false;
  int32_t drafter_block_size = 0;
};

class Scheduler;

class Engine {
 public:
  // Loads everything; throws dfl::Error with a one-line message on bad files or options.
  explicit Engine(const EngineOptions& opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Validates it at once (prompt form, token ids in range, length against the
  // context and against the KV budget with nothing else running, block size) and throws
  // RequestRefused when it cannot run. Never blocks.
  RequestId submit(Request req);
  // Cancels a queued or running request: its KV is freed at once and its callback gets a final
  // update (kCancelled). Unknown or finished ids are ignored.
  void cancel(RequestId id);
  // Runs one step (see the file comment). Returns false when there was nothing to do.
  bool step();
  // Steps until every submitted request has finished.
  void run_until_idle();
  bool idle() const;

  const ModelInfo& info() const;
  EngineMetrics metrics() const;
  // The target's tokenizer and chat template (nullptr when the checkpoint has none).
  const Tokenizer* tokenizer() const;
  const ChatTemplate* chat_template() const;
  // Stop ids the engine uses by default (generation_config eos ids + the tokenizer's eos).
  const std::vector<int32_t>& eos_ids() const;
  // Prompt ids a request would run with (tokenized / rendered), without submitting it.
  std::vector<int32_t> render_prompt(const Prompt& p) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dfl
