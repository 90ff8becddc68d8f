// dflash dump-taps: training data for a DFlash drafter (engine/tap_dump.h). Reads prompts
// (JSONL {"prompt": text} / {"prompt_ids": [...]}, or one text per line), generates a response to
// each WITH THE TARGET through the batched engine (greedy, or sampled for a chosen fraction),
// then runs every prompt + response through the target once more and writes the taps at the
// chosen layers for every position as .npy shards + meta.json.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "engine/engine.h"
#include "engine/tap_dump.h"
#include "run_common.h"

namespace dfl::cli {

namespace {
const std::vector<FlagSpec> kFlags = [] {
  std::vector<FlagSpec> f = engine_flags();
  const std::vector<FlagSpec> own = {
      {"--prompts", "FILE", "prompts: JSONL ({\"prompt\": text} or {\"prompt_ids\": [...]}) or one text per line"},
      {"--out", "DIR", "output folder (meta.json + shard-NNNNN.{tokens,taps}.npy)"},
      {"--layers", "1,4,8", "DFlash target_layer_ids to tap (aux index = id + 1)"},
      {"--sampled-fraction", "F", "fraction of prompts whose response is sampled at --temperature "
                                  "(the rest greedy; default 0 = all greedy)"},
      {"--shard-tokens", "N", "tokens per shard (default 65536)"},
      {"--limit", "N", "use only the first N prompts"},
  };
  f.insert(f.end(), own.begin(), own.end());
  f.insert(f.end(), request_flags().begin(), request_flags().end());
  f.push_back({"--help", "", "show this help"});
  return f;
}();

std::vector<Prompt> read_prompts(const std::string& path, int64_t limit) {
  std::ifstream in(path);
  DFL_CHECK(in, "cannot open --prompts file '", path, "'");
  std::vector<Prompt> out;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line) && (limit < 0 || int64_t(out.size()) < limit)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Prompt p;
    if (line[0] == '{') {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception& e) {
        DFL_CHECK(false, path, ":", line_no, ": not valid JSON (", e.what(), ")");
      }
      if (j.contains("prompt_ids")) {
        DFL_CHECK(j["prompt_ids"].is_array(), path, ":", line_no, ": prompt_ids must be an array");
        p.ids = j["prompt_ids"].get<std::vector<int32_t>>();
      } else {
        DFL_CHECK(j.contains("prompt") && j["prompt"].is_string(), path, ":", line_no,
                  ": needs a \"prompt\" string or \"prompt_ids\"");
        p.text = j["prompt"].get<std::string>();
      }
    } else {
      p.text = line;
    }
    out.push_back(std::move(p));
  }
  DFL_CHECK(!out.empty(), "no prompts in '", path, "'");
  return out;
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int cmd_dump_taps(int argc, char** argv) {
  Args args(kFlags, argc, argv, 2);
  if (args.has("--help")) {
    std::cout << usage("dflash dump-taps --model DIR --prompts FILE --out DIR --layers 1,4,8 "
                       "[--max-tokens N] [--temperature T --sampled-fraction F] [--max-seqs N]",
                       kFlags);
    return 0;
  }
  DFL_CHECK(args.positional().empty(), "unexpected argument '",
            args.positional().empty() ? "" : args.positional()[0], "'");
  DFL_CHECK(args.has("--model"), "--model DIR is required");
  DFL_CHECK(args.has("--prompts"), "--prompts FILE is required");
  DFL_CHECK(args.has("--out"), "--out DIR is required");
  DFL_CHECK(args.has("--layers"), "--layers 1,4,8 (the DFlash target_layer_ids) is required");
  DFL_CHECK(!args.has("--draft"), "dump-taps generates with the target alone: drop --draft");
  const std::vector<int32_t> layers = parse_ids(args.str("--layers"));
  const double frac = args.number("--sampled-fraction", 0.0);
  DFL_CHECK(frac >= 0 && frac <= 1, "--sampled-fraction must be in [0, 1]");
  const Request defaults = request_defaults(args);
  DFL_CHECK(frac == 0 || defaults.sampling.temperature > 0,
            "--sampled-fraction needs --temperature > 0");
  const std::vector<Prompt> prompts = read_prompts(args.str("--prompts"), args.integer("--limit", -1));
  EngineOptions eo = engine_options(args);

  // The target for the tap pass (loaded first: a bad --layers fails before any generation).
  ThreadPool pool(eo.threads);
  LoadOptions lo;
  lo.max_context = eo.max_context;
  auto target = load_causal_lm(eo.model_dir, lo, pool);
  const ModelConfig& cfg = target->config();
  const std::vector<int32_t> aux = tap_aux_indices(layers, cfg.n_layers);

  // 1. Responses from the target, all prompts through the batched engine.
  std::vector<TapSequence> seqs(prompts.size());
  const double t0 = now_s();
  int64_t gen_tokens = 0;
  {
    Engine engine(eo);
    std::map<RequestId, size_t> which;
    for (size_t i = 0; i < prompts.size(); ++i) {
      Request r = defaults;
      r.prompt = prompts[i];
      // Every 1/frac-th prompt sampled, spread evenly; each with its own seed.
      const bool sampled = frac > 0 && int64_t((i + 1) * frac) > int64_t(i * frac);
      if (!sampled) r.sampling.temperature = 0;
      r.sampling.seed = defaults.sampling.seed + i;
      seqs[i].tokens = engine.render_prompt(prompts[i]);
      seqs[i].prompt_len = static_cast<int32_t>(seqs[i].tokens.size());
      seqs[i].sampled = sampled;
      r.on_update = [&seqs, i, &gen_tokens](const RequestUpdate& u) {
        seqs[i].tokens.insert(seqs[i].tokens.end(), u.new_tokens.begin(), u.new_tokens.end());
        gen_tokens += int64_t(u.new_tokens.size());
      };
      try {
        engine.submit(std::move(r));
      } catch (const RequestRefused& e) {
        DFL_CHECK(false, "prompt ", i + 1, " refused: ", e.message);
      }
    }
    size_t steps = 0;
    while (engine.step())
      if (++steps % 64 == 0)
        std::fprintf(stderr, "\r[dump-taps] generating: %lld tokens, %.1f tok/s", (long long)gen_tokens,
                     gen_tokens / (now_s() - t0));
  }
  const double t1 = now_s();
  std::fprintf(stderr, "\r[dump-taps] generated %lld tokens for %zu prompts in %.1fs (%.1f tok/s)\n",
               (long long)gen_tokens, prompts.size(), t1 - t0, gen_tokens / (t1 - t0));

  // 2. Taps of every prompt + response, one target pass each.
  nlohmann::ordered_json meta;
  meta["target"] = eo.model_dir;
  meta["target_num_layers"] = cfg.n_layers;
  meta["vocab_size"] = cfg.vocab_size;
  meta["generation"] = {{"max_tokens", defaults.max_tokens},
                        {"temperature", defaults.sampling.temperature},
                        {"top_k", defaults.sampling.top_k},
                        {"top_p", defaults.sampling.top_p},
                        {"sampled_fraction", frac},
                        {"seed", defaults.sampling.seed},
                        {"prompts_file", args.str("--prompts")}};
  TapShardWriter writer(args.str("--out"), layers, aux, cfg.hidden_size,
                        args.integer("--shard-tokens", 65536), meta);
  std::vector<float> taps;
  int64_t done = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    capture_taps(*target, 0, seqs[i].tokens, aux, taps);
    writer.add(seqs[i], taps);
    done += int64_t(seqs[i].tokens.size());
    if (i % 16 == 15 || i + 1 == seqs.size())
      std::fprintf(stderr, "\r[dump-taps] taps: %zu/%zu sequences, %.1f tok/s", i + 1, seqs.size(),
                   done / (now_s() - t1));
  }
  const int64_t total = writer.finish();
  std::fprintf(stderr, "\n[dump-taps] wrote %lld tokens (%zu sequences, taps %zu x %d) to %s in %.1fs\n",
               (long long)total, seqs.size(), aux.size(), cfg.hidden_size, args.str("--out").c_str(),
               now_s() - t0);
  return 0;
}

}  // namespace dfl::cli
