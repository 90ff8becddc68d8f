// dflash run: one prompt streamed to the terminal, or a JSONL batch (--batch) run through the
// batched engine. Flag parsing and printing only: the engine (engine/engine.h) does the rest.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "core/mmap.h"
#include "engine/engine.h"
#include "pipeline_cli.h"
#include "run_common.h"

namespace dfl::cli {

namespace {
const std::vector<FlagSpec> kFlags = [] {
  std::vector<FlagSpec> f = engine_flags();
  const std::vector<FlagSpec> own = {
      {"--prompt", "TEXT", "prompt text"},
      {"--prompt-file", "F", "read the prompt text from a file"},
      {"--prompt-ids", "1,2,3", "prompt as comma-separated token ids"},
      {"--batch", "FILE.jsonl", "one request per line: {id, prompt | prompt_ids | messages, max_tokens, "
                                "temperature, seed, stop, speculative}; results as JSON lines on stdout"},
      {"--chat", "", "wrap the prompt in the model's chat template (thinking off by default)"},
      {"--think", "", "with --chat: enable_thinking=true"},
      {"--system", "TEXT", "with --chat: a system message"},
      {"--trace", "", "with --draft: record per cycle the drafted ids and how many were accepted"},
      {"--json", "", "print one JSON object {token_ids, text, stats} instead of streaming"},
      {"--compare", "", "with --draft: run the same prompt target-only afterwards and report the "
                        "speed-up measured in this run (and whether the tokens are identical)"},
  };
  f.insert(f.end(), own.begin(), own.end());
  f.insert(f.end(), request_flags().begin(), request_flags().end());
  f.push_back({"--help", "", "show this help"});
  return f;
}();

// --batch: every line submitted at once, results printed as each finishes.
int run_batch(Engine& engine, const Args& args, const Request& defaults) {
  std::ifstream in(args.str("--batch"));
  DFL_CHECK(in, "cannot open --batch file '", args.str("--batch"), "'");
  std::string line;
  int line_no = 0, submitted = 0, finished = 0, bad = 0;
  std::map<RequestId, std::string> client_ids;
  std::map<RequestId, std::vector<int32_t>> toks;
  std::map<RequestId, std::string> text;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Request r = defaults;
    std::string cid;
    try {
      r = request_from_json(nlohmann::ordered_json::parse(line), defaults, &cid);
      if (cid.empty()) cid = std::to_string(line_no);
      r.on_update = [&, cid](const RequestUpdate& u) {
        auto& t = toks[u.id];
        t.insert(t.end(), u.new_tokens.begin(), u.new_tokens.end());
        text[u.id] += u.text_delta;
        if (!u.finished) return;
        nlohmann::ordered_json j;
        j["id"] = cid;
        j["token_ids"] = t;
        j["text"] = text[u.id];
        j["finish_reason"] = finish_reason_name(u.reason);
        j["stats"] = stats_json(*u.stats, engine.info().has_drafter);
        std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n"
                  << std::flush;
        ++finished;
        toks.erase(u.id);
        text.erase(u.id);
      };
      engine.submit(std::move(r));
      ++submitted;
    } catch (const RequestRefused& e) {
      std::fprintf(stderr, "dflash: --batch line %d: %s (skipped)\n", line_no, e.message.c_str());
      ++bad;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dflash: --batch line %d: %s (skipped)\n", line_no, e.what());
      ++bad;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (!engine.idle()) {
    engine.step();
    std::fprintf(stderr, "\r[batch] %d/%d done", finished, submitted);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineMetrics m = engine.metrics();
  std::fprintf(stderr, "\r[batch] %d requests (%d skipped) | %lld prompt + %lld generated tok in %.2fs"
                       " | %.1f gen tok/s | drafted %lld accepted %lld | preemptions %lld\n",
               submitted, bad, (long long)m.prompt_tokens_total, (long long)m.generation_tokens_total, s,
               s > 0 ? m.generation_tokens_total / s : 0.0, (long long)m.spec_draft_tokens_total,
               (long long)m.spec_accepted_tokens_total, (long long)m.preemptions_total);
  return bad ? 1 : 0;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  Args args(kFlags, argc, argv, 2);
  if (args.has("--help")) {
    std::cout << usage("dflash run --model DIR (--prompt TEXT | --prompt-file F | --prompt-ids 1,2,3 | "
                       "--batch FILE.jsonl) [--draft DIR] [--chat] [flags]",
                       kFlags);
    return 0;
  }
  DFL_CHECK(args.positional().empty(), "unexpected argument '",
            args.positional().empty() ? "" : args.positional()[0], "'");
  DFL_CHECK(args.has("--model"), "--model DIR is required");
  const int n_prompt_src = args.has("--prompt") + args.has("--prompt-file") + args.has("--prompt-ids") +
                           args.has("--batch");
  DFL_CHECK(n_prompt_src == 1, "give exactly one of --prompt, --prompt-file, --prompt-ids, --batch");
  DFL_CHECK(!(args.has("--chat") && args.has("--prompt-ids")), "--chat needs a text prompt");

  EngineOptions eo = engine_options(args);
  if (run_pipeline_worker(args, eo.threads)) return 0;  // a stage of `mpirun ... --pipeline-parallel N`
  if (!args.has("--batch") && !args.has("--max-seqs")) eo.max_seqs = 1;
  Request req = request_defaults(args);
  req.trace = args.has("--trace");
  Engine engine(eo);
  if (args.has("--batch")) return run_batch(engine, args, req);

  if (args.has("--prompt-ids")) {
    req.prompt.ids = parse_ids(args.str("--prompt-ids"));
  } else {
    std::string text = args.has("--prompt") ? args.str("--prompt") : read_text_file(args.str("--prompt-file"));
    DFL_CHECK(!text.empty(), "the prompt is empty");
    if (args.has("--chat")) {
      DFL_CHECK(engine.chat_template(), "'", eo.model_dir, "' has no chat_template in tokenizer_config.json");
      req.prompt.messages = nlohmann::ordered_json::array();
      if (args.has("--system")) req.prompt.messages.push_back({{"role", "system"}, {"content", args.str("--system")}});
      req.prompt.messages.push_back({{"role", "user"}, {"content", text}});
      // DFlash drafters for Qwen3 are trained with thinking off: that is the default here.
      req.prompt.template_kwargs = {{"enable_thinking", args.has("--think")}};
    } else {
      req.prompt.text = text;
    }
  }

  const bool json = args.has("--json");
  const bool have_text = engine.tokenizer() != nullptr;
  std::vector<int32_t> out;
  std::vector<CycleTrace> trace;
  RequestStats stats;
  FinishReason reason = FinishReason::kNone;
  std::string text;
  const Request plain_req = req;  // for --compare (before the callback is attached)
  req.on_update = [&](const RequestUpdate& u) {
    out.insert(out.end(), u.new_tokens.begin(), u.new_tokens.end());
    text += u.text_delta;
    if (!json) {
      if (have_text) {
        std::fputs(u.text_delta.c_str(), stdout);
      } else {
        for (int32_t t : u.new_tokens) std::printf("%d ", t);
      }
      std::fflush(stdout);
    }
    if (u.finished) {
      stats = *u.stats;
      reason = u.reason;
      if (u.trace) trace = *u.trace;
    }
  };
  try {
    engine.submit(std::move(req));
  } catch (const RequestRefused& e) {
    throw Error(e.message);
  }
  engine.run_until_idle();
  if (!json) std::fputs("\n", stdout);
  std::fflush(stdout);

  // --compare: the same request target-only, in the same process and minutes.
  std::optional<RequestStats> plain_stats;
  bool identical = false;
  if (args.has("--compare") && engine.info().has_drafter) {
    Request p = plain_req;
    p.speculative = false;
    std::vector<int32_t> plain_out;
    p.on_update = [&](const RequestUpdate& u) {
      plain_out.insert(plain_out.end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finished) plain_stats = *u.stats;
    };
    engine.submit(std::move(p));
    engine.run_until_idle();
    identical = plain_out == out;
  }

  nlohmann::ordered_json st = stats_json(stats, engine.info().has_drafter);
  st["stop_reason"] = finish_reason_name(reason);
  st["threads"] = eo.threads;
  if (json) {
    nlohmann::ordered_json j;
    j["token_ids"] = out;
    j["text"] = text;
    j["finish_reason"] = finish_reason_name(reason);
    j["stats"] = st;
    if (plain_stats) {
      j["compare"] = {{"target_only", stats_json(*plain_stats, false)}, {"identical", identical}};
    }
    if (!trace.empty() || args.has("--trace")) {
      nlohmann::ordered_json cycles = nlohmann::ordered_json::array();
      for (const auto& c : trace) cycles.push_back({{"drafted", c.drafted}, {"accepted", c.accepted}});
      j["cycles"] = cycles;
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    print_stats_line(stats, engine.info().has_drafter, reason);
    if (plain_stats) {
      const double spec_s = stats.e2e_s - stats.ttft_s, plain_s = plain_stats->e2e_s - plain_stats->ttft_s;
      const double spec_tps = spec_s > 0 ? (stats.generated_tokens - 1) / spec_s : 0;
      const double plain_tps = plain_s > 0 ? (plain_stats->generated_tokens - 1) / plain_s : 0;
      std::fprintf(stderr, "[compare] target-only %.1f tok/s vs speculative %.1f tok/s: %.2fx "
                           "(measured in this run)%s\n",
                   plain_tps, spec_tps, plain_tps > 0 ? spec_tps / plain_tps : 0.0,
                   identical ? ", tokens identical" : ", tokens DIFFER (sampling at T > 0?)");
    }
    for (size_t i = 0; i < trace.size(); ++i) {
      std::fprintf(stderr, "[cycle %zu] accepted %d of", i, trace[i].accepted);
      for (int32_t t : trace[i].drafted) std::fprintf(stderr, " %d", t);
      std::fprintf(stderr, "\n");
    }
  }
  return 0;
}

}  // namespace dfl::cli
