// dflash run: target-only or DFlash speculative generation with streamed text.
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "core/mmap.h"
#include "engine/generator.h"
#include "engine/model_assets.h"
#include "spec/dflash_proposer.h"

namespace dfl::cli {

namespace {
const std::vector<FlagSpec> kFlags = {
    {"--model", "DIR", "target model folder (config.json + safetensors + tokenizer.json)"},
    {"--draft", "DIR", "DFlash drafter folder: enables speculative decoding"},
    {"--prompt", "TEXT", "prompt text"},
    {"--prompt-file", "F", "read the prompt text from a file"},
    {"--prompt-ids", "1,2,3", "prompt as comma-separated token ids"},
    {"--chat", "", "wrap the prompt in the model's chat template (thinking off by default)"},
    {"--think", "", "with --chat: enable_thinking=true"},
    {"--system", "TEXT", "with --chat: a system message"},
    {"--max-tokens", "N", "tokens to generate (default 256)"},
    {"--temperature", "T", "sampling temperature; 0 = greedy (default 0)"},
    {"--top-k", "K", "keep the K most likely tokens (default 0 = off)"},
    {"--top-p", "P", "nucleus sampling mass (default 1 = off)"},
    {"--min-p", "P", "drop tokens below P x the top probability (default 0 = off)"},
    {"--seed", "S", "RNG seed (default 0)"},
    {"--threads", "N", "worker threads (default: all cores)"},
    {"--ctx-size", "N", "context limit in tokens (default 4096)"},
    {"--block-size", "B", "speculative block size incl. the anchor (default: the drafter's); "
                          "'auto' picks the draft length per cycle from the measured verify cost "
                          "curve and the running acceptance (engine/block_policy.h)"},
    {"--weights", "FMT", "bf16 (default: as stored, prepacked where the machine has a faster "
                         "layout) | stored (no repacking) | q8 (int8 per-block, made at load)"},
    {"--ignore-eos", "", "keep generating past end-of-sequence tokens"},
    {"--trace", "", "with --draft: record per cycle the drafted ids and how many were accepted"},
    {"--json", "", "print one JSON object {token_ids, text, stats} instead of streaming"},
    {"--help", "", "show this help"},
};

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
}  // namespace

int cmd_run(int argc, char** argv) {
  Args args(kFlags, argc, argv, 2);
  if (args.has("--help")) {
    std::cout << usage("dflash run --model DIR (--prompt TEXT | --prompt-file F | --prompt-ids 1,2,3) "
                       "[--draft DIR] [--chat] [flags]",
                       kFlags);
    return 0;
  }
  DFL_CHECK(args.positional().empty(), "unexpected argument '",
            args.positional().empty() ? "" : args.positional()[0], "'");
  DFL_CHECK(args.has("--model"), "--model DIR is required");
  const int n_prompt_src = args.has("--prompt") + args.has("--prompt-file") + args.has("--prompt-ids");
  DFL_CHECK(n_prompt_src == 1, "give exactly one of --prompt, --prompt-file, --prompt-ids");
  DFL_CHECK(!(args.has("--chat") && args.has("--prompt-ids")), "--chat needs a text prompt");

  GenerateRequest req;
  req.max_tokens = static_cast<int32_t>(args.integer("--max-tokens", 256));
  DFL_CHECK(req.max_tokens > 0, "--max-tokens must be positive");
  req.sampling.temperature = static_cast<float>(args.number("--temperature", 0.0));
  req.sampling.top_k = static_cast<int32_t>(args.integer("--top-k", 0));
  req.sampling.top_p = static_cast<float>(args.number("--top-p", 1.0));
  req.sampling.min_p = static_cast<float>(args.number("--min-p", 0.0));
  req.sampling.seed = static_cast<uint64_t>(args.integer("--seed", 0));
  DFL_CHECK(req.sampling.temperature >= 0, "--temperature must be >= 0");
  DFL_CHECK(req.sampling.top_k >= 0, "--top-k must be >= 0");
  DFL_CHECK(req.sampling.top_p > 0 && req.sampling.top_p <= 1, "--top-p must be in (0, 1]");
  DFL_CHECK(req.sampling.min_p >= 0 && req.sampling.min_p <= 1, "--min-p must be in [0, 1]");
  const bool auto_block = args.str("--block-size") == "auto";
  req.block_size = auto_block ? 0 : static_cast<int32_t>(args.integer("--block-size", 0));
  DFL_CHECK(req.block_size >= 0 && req.block_size <= 256, "--block-size must be in [1, 256]");
  req.trace = args.has("--trace");
  const int threads = static_cast<int>(args.integer("--threads", hardware_threads()));
  DFL_CHECK(threads >= 1 && threads <= 1024, "--threads must be in [1, 1024]");
  const int32_t ctx = static_cast<int32_t>(args.integer("--ctx-size", 4096));
  DFL_CHECK(ctx >= 2, "--ctx-size must be at least 2");

  const std::string model_dir = args.str("--model");
  const ModelAssets assets = ModelAssets::load(model_dir);
  if (args.has("--prompt-ids")) {
    req.prompt = parse_ids(args.str("--prompt-ids"));
  } else {
    std::string text = args.has("--prompt") ? args.str("--prompt") : read_text_file(args.str("--prompt-file"));
    DFL_CHECK(!text.empty(), "the prompt is empty");
    if (args.has("--chat")) {
      DFL_CHECK(assets.chat.has_value(), "'", model_dir, "' has no chat_template in tokenizer_config.json");
      nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
      if (args.has("--system")) msgs.push_back({{"role", "system"}, {"content", args.str("--system")}});
      msgs.push_back({{"role", "user"}, {"content", text}});
      ChatOptions opt;
      opt.add_generation_prompt = true;
      // DFlash drafters for Qwen3 are trained with thinking off: that is the default here.
      opt.extra["enable_thinking"] = args.has("--think");
      text = render_chat(*assets.chat, msgs, opt);
    }
    req.prompt = assets.require_tokenizer().encode(text, !args.has("--chat"));
  }
  DFL_CHECK(!req.prompt.empty(), "the prompt is empty");
  if (!args.has("--ignore-eos")) req.stop_ids = assets.eos_ids;

  ThreadPool pool(threads);
  LoadOptions lo;
  lo.max_context = ctx;
  const std::string wfmt = args.str("--weights", "bf16");
  DFL_CHECK(wfmt == "bf16" || wfmt == "q8" || wfmt == "stored",
            "--weights must be bf16, stored or q8, got '", wfmt, "'");
  if (wfmt == "q8") lo.weights_format = WeightsFormat::kQ8;
  lo.prepack = wfmt != "stored";
  DFL_CHECK(!auto_block || args.has("--draft"), "--block-size auto needs --draft");
  std::unique_ptr<DFlashProposer> proposer;
  std::unique_ptr<CausalLM> target;
  if (args.has("--draft")) {
    const ModelConfig dc = load_model_config(args.str("--draft"));
    DFL_CHECK(dc.dflash.has_value(), "'", args.str("--draft"), "' is not a DFlash drafter");
    lo.max_block = std::max(dc.dflash->block_size, req.block_size);
  }
  target = load_causal_lm(model_dir, lo, pool);
  for (int32_t id : req.prompt)
    DFL_CHECK(id >= 0 && id < target->config().vocab_size, "prompt token id ", id,
              " is out of range for vocab_size ", target->config().vocab_size);
  if (args.has("--draft")) {
    auto drafter = std::make_unique<DFlashDraftModel>(args.str("--draft"), *target, lo, pool);
    proposer = std::make_unique<DFlashProposer>(std::move(drafter), *target);
  }
  Generator gen(*target, proposer.get());
  std::unique_ptr<BlockPolicy> policy;
  if (auto_block) {
    // Seed the cost curve with a quick measurement (B = 1, 2, 4, 8, 16, ...); the policy
    // refines it online from every cycle's timings.
    policy = std::make_unique<BlockPolicy>(proposer->max_draft());
    std::vector<int32_t> bs;
    for (int32_t b = 1; b <= proposer->max_draft() + 1; b *= 2) bs.push_back(b);
    if (bs.back() != proposer->max_draft() + 1) bs.push_back(proposer->max_draft() + 1);
    const int32_t cal_ctx = std::min<int32_t>(32, target->kv().max_context() - bs.back());
    if (cal_ctx >= 0)
      policy->set_verify_cost(measure_verify_curve(*target, req.seq, bs, cal_ctx, 1,
                                                   &proposer->target_aux()));
    req.block_policy = policy.get();
  }

  const bool json = args.has("--json");
  std::optional<StreamDecoder> stream;
  if (!json && assets.tokenizer) stream.emplace(*assets.tokenizer, true);
  auto on_token = [&](int32_t tok) {
    if (stream) {
      std::fputs(stream->push(tok).c_str(), stdout);
      std::fflush(stdout);
    } else if (!json) {
      std::printf("%d ", tok);
      std::fflush(stdout);
    }
    return true;
  };
  const GenerateResult r = gen.generate(req, on_token);
  if (stream) std::fputs(stream->flush().c_str(), stdout);
  if (!json) std::fputs("\n", stdout);

  const GenerateStats& s = r.stats;
  nlohmann::ordered_json st;
  st["prompt_tokens"] = s.prompt_tokens;
  st["generated_tokens"] = s.generated_tokens;
  st["prefill_tok_s"] = s.prefill_s > 0 ? s.prompt_tokens / s.prefill_s : 0.0;
  st["decode_tok_s"] = s.decode_s > 0 ? (s.generated_tokens - 1) / s.decode_s : 0.0;
  st["prefill_s"] = s.prefill_s;
  st["decode_s"] = s.decode_s;
  st["stop_reason"] = r.stop_reason;
  st["threads"] = threads;
  if (proposer) {
    st["draft_steps"] = s.draft_steps;
    st["drafted_tokens"] = s.drafted_tokens;
    st["accepted_tokens"] = s.accepted_tokens;
    st["mean_acceptance_length"] = s.mean_acceptance_length();
    st["acceptance_histogram"] = s.acceptance_histogram;
    st["draft_s"] = s.draft_s;
    st["verify_s"] = s.verify_s;
    st["target_passes"] = s.target_passes;
    if (policy) st["draft_length_histogram"] = s.draft_length_histogram;
  }
  if (json) {
    nlohmann::ordered_json j;
    j["token_ids"] = r.tokens;
    j["text"] = assets.tokenizer ? assets.tokenizer->decode(r.tokens, true) : "";
    j["stats"] = st;
    if (req.trace) {
      nlohmann::ordered_json cycles = nlohmann::ordered_json::array();
      for (const auto& c : r.cycles) cycles.push_back({{"drafted", c.drafted}, {"accepted", c.accepted}});
      j["cycles"] = cycles;
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::fprintf(stderr, "[stats] prompt %d tok | generated %d tok | prefill %.1f tok/s | decode %.1f tok/s",
                 s.prompt_tokens, s.generated_tokens, st["prefill_tok_s"].get<double>(),
                 st["decode_tok_s"].get<double>());
    if (proposer)
      std::fprintf(stderr, " | tau %.2f | accepted %lld/%lld drafted | draft %.3fs verify %.3fs",
                   s.mean_acceptance_length(), (long long)s.accepted_tokens, (long long)s.drafted_tokens,
                   s.draft_s, s.verify_s);
    std::fprintf(stderr, " | stop: %s\n", r.stop_reason.c_str());
    if (req.trace)
      for (size_t i = 0; i < r.cycles.size(); ++i) {
        std::fprintf(stderr, "[cycle %zu] accepted %d of", i, r.cycles[i].accepted);
        for (int32_t t : r.cycles[i].drafted) std::fprintf(stderr, " %d", t);
        std::fprintf(stderr, "\n");
      }
  }
  return 0;
}

}  // namespace dfl::cli
