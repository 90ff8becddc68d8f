// What a client asks the engine for, and what it hears back. Plain data; no engine internals.
//
// A Request is submitted once (Engine::submit) and then lives in the engine until it finishes,
// is cancelled, or is refused. Its `on_update` callback runs on the engine thread (inside
// Engine::step or Engine::cancel), once per step in which something happened to the request:
// newly committed tokens, and a last call with `finished = true`. Callbacks must be quick and must
// not call back into the engine (queue work for the engine thread instead).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/sampler.h"

namespace dfl {

using RequestId = int64_t;

// Exactly one of the three forms is used: ids when non-empty, else messages when it is an array,
// else text. Text is encoded with the tokenizer's special-token rules (BOS where the model adds
// one); messages are rendered by the checkpoint's chat template with add_generation_prompt.
struct Prompt {
  std::vector<int32_t> ids;
  std::string text;
  nlohmann::ordered_json messages = nullptr;         // [{role, content}, ...] or null
  nlohmann::ordered_json tools = nullptr;            // tool schemas for the template, or null
  nlohmann::ordered_json template_kwargs = nullptr;  // e.g. {"enable_thinking": true}, or null
};

// Draft length: kBlockAuto picks it per cycle from the measured cost curve and acceptance
// (engine/block_policy.h); kBlockDefault uses the engine's default; N ≥ 1 is a verify block of N
// rows (anchor included), at most the drafter's trained block size.
constexpr int32_t kBlockAuto = -1;
constexpr int32_t kBlockDefault = 0;

struct Request {
  Prompt prompt;
  int32_t max_tokens = 256;
  SamplingParams sampling;              // seed: the request's own RNG stream
  std::vector<std::string> stop;        // stop strings: matched across token boundaries, not emitted
  std::vector<int32_t> stop_ids;        // extra stop ids (emitted in token_ids, not in text)
  bool ignore_eos = false;              // do not stop on the model's eos ids
  bool speculative = true;              // use the drafter (when the engine has one)
  int32_t block_size = kBlockDefault;
  int32_t top_logprobs = -1;            // -1: none; n ≥ 0: chosen token's logprob + top n
  std::string client_id;                // free text echoed in logs (e.g. a batch line's "id")
  bool trace = false;                   // keep per-cycle drafts (RequestUpdate::trace at the end)
  std::function<void(const struct RequestUpdate&)> on_update;
};

enum class FinishReason : uint8_t { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop" | "length" | "cancelled" | "error"

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;                                   // log p_target(token) at T = 1
  std::vector<std::pair<int32_t, float>> top;          // top_logprobs (id, logprob), best first
};

// One speculative cycle: what was drafted and how many of them the target accepted.
struct CycleTrace {
  std::vector<int32_t> drafted;
  int32_t accepted = 0;
};

struct RequestStats {
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // reserved (prefix caching); 0 today
  int64_t draft_steps = 0;           // verify passes that carried drafts
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  int64_t committed_in_cycles = 0;   // Σ (accepted + 1) over draft steps
  std::vector<int64_t> acceptance_histogram;    // [accepted count] → draft steps
  std::vector<int64_t> accepted_per_position;   // [draft position] → accepted drafts there
  std::vector<int64_t> draft_length_histogram;  // [drafted count] → target passes while decoding
  int64_t target_passes = 0;         // target forwards while decoding (with or without drafts)
  double draft_s = 0, verify_s = 0;  // time of the proposer passes / decoding target forwards this
                                     // request took part in (shared with its batch)
  int32_t preemptions = 0;
  double queue_s = 0;       // submit → first scheduled
  double ttft_s = 0;        // submit → first generated token
  double e2e_s = 0;         // submit → finished
  // τ: mean tokens committed per draft step (the paper's acceptance length); 0 without drafts.
  double mean_acceptance_length() const {
    return draft_steps ? double(committed_in_cycles) / double(draft_steps) : 0.0;
  }
};

struct RequestUpdate {
  RequestId id = 0;
  std::vector<int32_t> new_tokens;     // committed since the last update (after stop handling)
  std::string text_delta;              // their text; never splits a UTF-8 character
  std::vector<TokenLogprob> logprobs;  // parallel to new_tokens when top_logprobs ≥ 0
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;                   // reason == kError: what went wrong
  const RequestStats* stats = nullptr; // valid during the callback
  const std::vector<CycleTrace>* trace = nullptr;  // finished && Request::trace
};

// Refusal of a request at submit time (bad prompt, too long for the context, cannot fit the KV
// budget even alone, queue full). `message` is user-facing and names the numbers involved.
struct RequestRefused {
  enum class Kind : uint8_t { kInvalid, kTooLong, kNoCapacity, kQueueFull, kDraining } kind;
  std::string message;
};

}  // namespace dfl
