// What `run`, `bench` and `serve` share: engine flags → EngineOptions, request flags → Request
// defaults, a batch/JSON request line → Request, and the stats as JSON / one line.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "engine/engine.h"

namespace dfl::cli {

const std::vector<FlagSpec>& engine_flags();   // --model --draft --threads --ctx-size --weights ...
const std::vector<FlagSpec>& request_flags();  // --max-tokens --temperature ... --block-size
EngineOptions engine_options(const Args& args);  // also applies --ggml-act
// --ggml-act int8x2|int8|fp32: the process-wide GGUF activation mode (kernels/ops.h
// GgmlActivations; without the flag DFL_GGML_ACT, else int8x2). Every rank of a pipeline job
// parses the same flags, so all stages compute alike. apply_ggml_act before any kernel runs.
FlagSpec ggml_act_flag();
void apply_ggml_act(const Args& args);
// --kv-dtype f32|bf16 (default bf16).
KvDtype parse_kv_dtype(const Args& args);
Request request_defaults(const Args& args);
// {"id", "prompt" | "prompt_ids" | "messages", "max_tokens", "temperature", "top_k", "top_p",
//  "min_p", "seed", "stop", "speculative": {"enabled", "block_size"}}; missing fields keep
// `defaults`. Throws dfl::Error naming the field on a wrong type.
Request request_from_json(const nlohmann::ordered_json& j, const Request& defaults, std::string* id);
std::vector<int32_t> parse_ids(const std::string& csv);

nlohmann::ordered_json stats_json(const RequestStats& s, bool speculative);
void print_stats_line(const RequestStats& s, bool speculative, FinishReason reason);

}  // namespace dfl::cli
