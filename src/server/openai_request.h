// OpenAI request bodies → a dfl::Request plus what only the server needs.
//
// parse_openai_request(kind, body, limits) is a pure function (no I/O, no engine): it parses the
// JSON of POST /v1/chat/completions or /v1/completions and returns the request, or throws
// ApiError (status 400; `param` names the offending field, e.g. "messages[2].content",
// "stream_options.include_usage") for malformed JSON, a wrong type or a value out of range.
// Unknown fields are ignored; `null` counts as absent for every optional field.
//
// Fields (OpenAI names; both endpoints unless marked):
//   model (string)                       → ParsedRequest::model (empty when absent)
//   messages (chat; array of {role, content, ...}): role ∈ system|developer|user|assistant|tool;
//     content is a string, null, or an array of {"type": "text", "text": ...} parts (joined);
//     other keys (name, tool_calls, tool_call_id, reasoning_content) go to the template as given
//   prompt (completions): string | [token ids] | [one string] | [[token ids]] (batches of more
//     than one prompt are refused)
//   max_tokens | max_completion_tokens (int ≥ 1)  → engine.max_tokens; absent → max_tokens_set
//     is false and the server uses what the context leaves
//   temperature [0, 2], top_p (0, 1], top_k (int; ≤ 0 = off), min_p [0, 1], seed (int)
//   stop (string | [strings], at most limits.max_stop, each at most limits.max_stop_len bytes)
//   n [1, limits.max_n]
//   logprobs: chat bool + top_logprobs [0, 20]; completions int [0, 20]  → engine.top_logprobs
//   stream (bool), stream_options.include_usage (bool)
//   tools ([{type: "function", function: {name, ...}}]), tool_choice ("none" | "auto" |
//     "required" | {"type": "function", "function": {"name"}}) — chat only
//   chat_template_kwargs (object; e.g. enable_thinking)  → engine.prompt.template_kwargs
//   ignore_eos (bool)
//   speculative: {"enabled": bool, "block_size": int ≥ 1 | "auto"}  (our extension)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/request.h"
#include "server/api_error.h"

namespace dfl::server {

enum class ApiKind : uint8_t { kChat, kCompletions };

struct ParseLimits {
  int32_t max_n = 16;
  int32_t max_stop = 16;
  int32_t max_stop_len = 256;
  int32_t max_top_logprobs = 20;
};

struct ParsedRequest {
  ApiKind kind = ApiKind::kChat;
  std::string model;             // as sent; empty when absent
  dfl::Request engine;           // prompt, max_tokens, sampling, stop, ignore_eos, speculative, ...
  bool max_tokens_set = false;   // false: the server fills engine.max_tokens from the context
  bool stream = false;
  bool include_usage = false;    // stream_options.include_usage
  int32_t n = 1;
  bool logprobs = false;         // a logprobs block is wanted (then engine.top_logprobs ≥ 0)
  bool parse_tool_calls = false; // tools given and tool_choice != "none"
  // chat_template_kwargs.enable_thinking when the request sets it (as a bool), else unset (-1).
  int8_t enable_thinking = -1;
};

ParsedRequest parse_openai_request(ApiKind kind, std::string_view body,
                                   const ParseLimits& limits = {});

}  // namespace dfl::server
