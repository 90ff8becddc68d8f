#include "run_common.h"

#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/threadpool.h"
#include "kernels/ops.h"
#include "model/config_json.h"
#include "pipeline_cli.h"

namespace dfl::cli {

const std::vector<FlagSpec>& engine_flags() {
  static const std::vector<FlagSpec> f = with_pipeline_flags({
      {"--model", "DIR", "target model folder (config.json + safetensors + tokenizer.json)"},
      {"--draft", "DIR", "DFlash drafter folder: enables speculative decoding"},
      {"--threads", "N", "worker threads (default: all cores)"},
      {"--ctx-size", "N", "context limit in tokens per sequence (default 4096)"},
      {"--max-seqs", "N", "sequences running at once (default 16; run: 1 unless --batch)"},
      {"--kv-memory", "BYTES", "KV budget in bytes (default: enough for max-seqs x ctx-size)"},
      {"--kv-dtype", "T", "KV-cache element type: bf16 (default: half the bytes, head-major pages) | "
                          "f32 (what the reference-oracle tests run on)"},
      {"--max-batch-tokens", "N", "rows per step, the chunked-prefill budget (default 512)"},
      {"--weights", "FMT", "bf16 (default: as stored, prepacked where the machine has a faster "
                           "layout) | stored (no repacking) | q8 (int8 per-block, made at load)"},
      ggml_act_flag(),
      {"--window-edge", "E", "MiMo sliding layers keep W keys (w, default: HF/vLLM) or W+1 "
                             "(w+1: SGLang's reading)"},
  });
  return f;
}

FlagSpec ggml_act_flag() {
  return {"--ggml-act", "MODE",
          "activations of GGUF block-quantized matmuls: int8x2 (default: int8 plus an int8 residual, "
          "~15 bits: the real Gemma-3-270M keeps transformers' greedy picks) | int8 (one int8 per "
          "block, llama.cpp's precision: faster verify blocks and prefill, and its noise) | fp32 "
          "(the dequantized-weights reference; slow)"};
}

void apply_ggml_act(const Args& args) {
  if (!args.has("--ggml-act")) return;  // DFL_GGML_ACT or int8x2
  GgmlActivations a;
  const std::string s = args.str("--ggml-act");
  DFL_CHECK(ggml_activations_from_name(s, &a), "--ggml-act must be int8x2, int8 or fp32, got '", s, "'");
  set_ggml_activations(a);
}

const std::vector<FlagSpec>& request_flags() {
  static const std::vector<FlagSpec> f = {
      {"--max-tokens", "N", "tokens to generate (default 256)"},
      {"--temperature", "T", "sampling temperature; 0 = greedy (default 0)"},
      {"--top-k", "K", "keep the K most likely tokens (default 0 = off)"},
      {"--top-p", "P", "nucleus sampling mass (default 1 = off)"},
      {"--min-p", "P", "drop tokens below P x the top probability (default 0 = off)"},
      {"--seed", "S", "RNG seed (default 0)"},
      {"--block-size", "B", "speculative block size incl. the anchor (default: the drafter's); "
                            "'auto' picks the draft length per cycle from the measured verify cost "
                            "curve and the running acceptance (engine/block_policy.h)"},
      {"--no-spec", "", "with --draft: target-only for these requests"},
      {"--ignore-eos", "", "keep generating past end-of-sequence tokens"},
  };
  return f;
}

// The command-line default is bf16 (vLLM keeps K/V in the model dtype, llama.cpp in f16): half
// the memory, faster attention at long contexts, still lossless (decode and verify rows compute
// the same way over the same cache). The library default (EngineOptions) stays f32 for the
// bit-exactness tests against transformers.
KvDtype parse_kv_dtype(const Args& args) {
  KvDtype t = KvDtype::kBF16;
  const std::string s = args.str("--kv-dtype", "bf16");
  DFL_CHECK(kv_dtype_from_name(s.c_str(), &t), "--kv-dtype must be f32 or bf16, got '", s, "'");
  return t;
}

EngineOptions engine_options(const Args& args) {
  apply_ggml_act(args);
  EngineOptions eo;
  eo.model_dir = args.str("--model");
  eo.draft_dir = args.str("--draft");
  eo.threads = static_cast<int32_t>(args.integer("--threads", hardware_threads()));
  DFL_CHECK(eo.threads >= 1 && eo.threads <= 1024, "--threads must be in [1, 1024]");
  eo.max_context = static_cast<int32_t>(args.integer("--ctx-size", 4096));
  DFL_CHECK(eo.max_context >= 2, "--ctx-size must be at least 2");
  eo.max_seqs = static_cast<int32_t>(args.integer("--max-seqs", 16));
  DFL_CHECK(eo.max_seqs >= 1 && eo.max_seqs <= 4096, "--max-seqs must be in [1, 4096]");
  eo.kv_memory_bytes = args.integer("--kv-memory", 0);
  DFL_CHECK(eo.kv_memory_bytes >= 0, "--kv-memory must be >= 0");
  eo.kv_dtype = parse_kv_dtype(args);
  eo.max_batch_tokens = static_cast<int32_t>(args.integer("--max-batch-tokens", 512));
  DFL_CHECK(eo.max_batch_tokens >= 1, "--max-batch-tokens must be positive");
  const std::string wfmt = args.str("--weights", "bf16");
  DFL_CHECK(wfmt == "bf16" || wfmt == "q8" || wfmt == "stored",
            "--weights must be bf16, stored or q8, got '", wfmt, "'");
  if (wfmt == "q8") eo.weights_format = WeightsFormat::kQ8;
  eo.prepack = wfmt != "stored";
  if (args.has("--window-edge"))
    eo.config.window_edge = cfg::parse_window_edge(args.str("--window-edge"), "--window-edge");
  const bool auto_block = args.str("--block-size") == "auto";
  DFL_CHECK(!auto_block || args.has("--draft"), "--block-size auto needs --draft");
  eo.calibrate = auto_block;
  add_pipeline_target(args, eo);
  return eo;
}

Request request_defaults(const Args& args) {
  Request r;
  r.max_tokens = static_cast<int32_t>(args.integer("--max-tokens", 256));
  DFL_CHECK(r.max_tokens > 0, "--max-tokens must be positive");
  SamplingParams& s = r.sampling;
  s.temperature = static_cast<float>(args.number("--temperature", 0.0));
  s.top_k = static_cast<int32_t>(args.integer("--top-k", 0));
  s.top_p = static_cast<float>(args.number("--top-p", 1.0));
  s.min_p = static_cast<float>(args.number("--min-p", 0.0));
  s.seed = static_cast<uint64_t>(args.integer("--seed", 0));
  DFL_CHECK(s.temperature >= 0, "--temperature must be >= 0");
  DFL_CHECK(s.top_k >= 0, "--top-k must be >= 0");
  DFL_CHECK(s.top_p > 0 && s.top_p <= 1, "--top-p must be in (0, 1]");
  DFL_CHECK(s.min_p >= 0 && s.min_p <= 1, "--min-p must be in [0, 1]");
  if (args.str("--block-size") == "auto") {
    r.block_size = kBlockAuto;
  } else {
    r.block_size = static_cast<int32_t>(args.integer("--block-size", 0));
    DFL_CHECK(r.block_size >= 0 && r.block_size <= 256, "--block-size must be in [1, 256]");
  }
  r.speculative = !args.has("--no-spec");
  r.ignore_eos = args.has("--ignore-eos");
  return r;
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    DFL_CHECK(!item.empty() && end && *end == '\0' && v >= 0 && v < (1l << 31),
              "--prompt-ids: '", item, "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

Request request_from_json(const nlohmann::ordered_json& j, const Request& defaults, std::string* id) {
  DFL_CHECK(j.is_object(), "a request must be a JSON object");
  Request r = defaults;
  auto num = [&](const char* k, auto& dst, double lo, double hi) {
    if (!j.contains(k) || j[k].is_null()) return;
    DFL_CHECK(j[k].is_number(), "'", k, "' must be a number");
    const double v = j[k].get<double>();
    DFL_CHECK(v >= lo && v <= hi, "'", k, "' = ", v, " is outside [", lo, ", ", hi, "]");
    dst = static_cast<std::remove_reference_t<decltype(dst)>>(v);
  };
  if (j.contains("id")) *id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
  int n_src = 0;
  if (j.contains("prompt")) {
    DFL_CHECK(j["prompt"].is_string(), "'prompt' must be a string");
    r.prompt.text = j["prompt"].get<std::string>();
    ++n_src;
  }
  if (j.contains("prompt_ids")) {
    DFL_CHECK(j["prompt_ids"].is_array(), "'prompt_ids' must be an array of token ids");
    for (const auto& x : j["prompt_ids"]) {
      DFL_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < (1ll << 31),
                "'prompt_ids' must hold token ids");
      r.prompt.ids.push_back(x.get<int32_t>());
    }
    ++n_src;
  }
  if (j.contains("messages")) {
    DFL_CHECK(j["messages"].is_array(), "'messages' must be an array");
    r.prompt.messages = j["messages"];
    ++n_src;
  }
  DFL_CHECK(n_src == 1, "give exactly one of 'prompt', 'prompt_ids', 'messages'");
  num("max_tokens", r.max_tokens, 1, 1 << 30);
  num("temperature", r.sampling.temperature, 0, 100);
  num("top_k", r.sampling.top_k, 0, 1 << 30);
  num("top_p", r.sampling.top_p, 1e-9, 1);
  num("min_p", r.sampling.min_p, 0, 1);
  num("seed", r.sampling.seed, 0, 9.007199254740992e15);
  if (j.contains("stop") && !j["stop"].is_null()) {
    r.stop.clear();
    if (j["stop"].is_string()) {
      r.stop.push_back(j["stop"].get<std::string>());
    } else {
      DFL_CHECK(j["stop"].is_array(), "'stop' must be a string or an array of strings");
      for (const auto& s : j["stop"]) {
        DFL_CHECK(s.is_string(), "'stop' must be a string or an array of strings");
        r.stop.push_back(s.get<std::string>());
      }
    }
  }
  if (j.contains("speculative") && !j["speculative"].is_null()) {
    const auto& sp = j["speculative"];
    DFL_CHECK(sp.is_object(), "'speculative' must be an object {enabled, block_size}");
    if (sp.contains("enabled")) {
      DFL_CHECK(sp["enabled"].is_boolean(), "'speculative.enabled' must be true or false");
      r.speculative = sp["enabled"].get<bool>();
    }
    if (sp.contains("block_size")) {
      const auto& b = sp["block_size"];
      if (b.is_string()) {
        DFL_CHECK(b.get<std::string>() == "auto", "'speculative.block_size' must be a number or \"auto\"");
        r.block_size = kBlockAuto;
      } else {
        DFL_CHECK(b.is_number_integer() && b.get<int64_t>() >= 1 && b.get<int64_t>() <= 256,
                  "'speculative.block_size' must be a number in [1, 256] or \"auto\"");
        r.block_size = b.get<int32_t>();
      }
    }
  }
  return r;
}

nlohmann::ordered_json stats_json(const RequestStats& s, bool speculative) {
  nlohmann::ordered_json st;
  st["prompt_tokens"] = s.prompt_tokens;
  st["generated_tokens"] = s.generated_tokens;
  st["ttft_s"] = s.ttft_s;
  st["e2e_s"] = s.e2e_s;
  const double decode_s = s.e2e_s - s.ttft_s;
  st["prefill_tok_s"] = s.ttft_s > 0 ? s.prompt_tokens / s.ttft_s : 0.0;
  st["decode_tok_s"] = decode_s > 0 ? (s.generated_tokens - 1) / decode_s : 0.0;
  st["prefill_s"] = s.ttft_s;
  st["decode_s"] = decode_s;
  st["preemptions"] = s.preemptions;
  if (speculative) {
    st["draft_steps"] = s.draft_steps;
    st["drafted_tokens"] = s.drafted_tokens;
    st["accepted_tokens"] = s.accepted_tokens;
    st["mean_acceptance_length"] = s.mean_acceptance_length();
    st["acceptance_histogram"] = s.acceptance_histogram;
    st["draft_length_histogram"] = s.draft_length_histogram;
    st["draft_s"] = s.draft_s;
    st["verify_s"] = s.verify_s;
    st["target_passes"] = s.target_passes;
  }
  return st;
}

void print_stats_line(const RequestStats& s, bool speculative, FinishReason reason) {
  const nlohmann::ordered_json st = stats_json(s, speculative);
  std::fprintf(stderr, "[stats] prompt %d tok | generated %d tok | prefill %.1f tok/s | decode %.1f tok/s",
               s.prompt_tokens, s.generated_tokens, st["prefill_tok_s"].get<double>(),
               st["decode_tok_s"].get<double>());
  if (speculative)
    std::fprintf(stderr, " | tau %.2f | accepted %lld/%lld drafted | draft %.3fs verify %.3fs",
                 s.mean_acceptance_length(), (long long)s.accepted_tokens, (long long)s.drafted_tokens,
                 s.draft_s, s.verify_s);
  std::fprintf(stderr, " | stop: %s\n", finish_reason_name(reason));
}

}  // namespace dfl::cli
