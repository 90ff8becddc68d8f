#include "bench_concurrency.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>

#include "bench_proposers.h"
#include "core/error.h"

namespace dfl::cli {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct RunFigures {
  double tok_s = 0, ttft_ms = 0, itl_ms = 0, tau = 0;
  std::vector<std::vector<int32_t>> outputs;
};

// c requests at once through `e`; figures of one run.
RunFigures run_level(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int32_t c,
                     int32_t tokens, bool spec, int32_t block) {
  RunFigures f;
  f.outputs.assign(size_t(c), {});
  std::vector<double> ttft, itl;
  int64_t generated = 0, committed = 0, steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < c; ++i) {
    Request r;
    r.prompt.ids = prompts[size_t(i)];
    r.max_tokens = tokens;
    r.ignore_eos = true;
    r.speculative = spec;
    r.block_size = block;
    r.on_update = [&, i](const RequestUpdate& u) {
      auto& o = f.outputs[size_t(i)];
      o.insert(o.end(), u.new_tokens.begin(), u.new_tokens.end());
      if (!u.finished) return;
      const RequestStats& s = *u.stats;
      generated += s.generated_tokens;
      committed += s.committed_in_cycles;
      steps += s.draft_steps;
      ttft.push_back(1e3 * s.ttft_s);
      if (s.generated_tokens > 1) itl.push_back(1e3 * (s.e2e_s - s.ttft_s) / (s.generated_tokens - 1));
    };
    e.submit(std::move(r));
  }
  e.run_until_idle();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.tok_s = wall > 0 ? double(generated) / wall : 0;
  f.ttft_ms = median(ttft);
  f.itl_ms = median(itl);
  f.tau = steps ? double(committed) / double(steps) : 0;
  return f;
}

}  // namespace

nlohmann::ordered_json run_concurrency_bench(const ConcurrencyBench& b,
                                             const std::function<void(const std::string&)>& note) {
  DFL_CHECK(!b.levels.empty(), "--concurrency needs at least one level");
  const int32_t max_c = *std::max_element(b.levels.begin(), b.levels.end());
  EngineOptions eo = b.engine;
  eo.max_seqs = max_c;
  eo.max_context = std::max(eo.max_context, b.prompt + b.tokens + 64);
  std::unique_ptr<ReplayProposer> replay;
  const bool has_draft = !eo.draft_dir.empty();
  if (has_draft)
    eo.wrap_proposer = [&](Proposer* real) -> Proposer* {
      replay = std::make_unique<ReplayProposer>(*real, std::vector<int32_t>{}, 1 << 30);
      return replay.get();
    };
  note("loading " + eo.model_dir + (has_draft ? " + " + eo.draft_dir : ""));
  Engine e(eo);
  const int32_t V = e.info().vocab_size;
  if (replay) replay->set_vocab(V);
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < max_c; ++i) {
    std::mt19937 rng(1000 + i);
    std::vector<int32_t> p;
    for (int32_t t = 0; t < b.prompt; ++t) p.push_back(int32_t(rng() % uint32_t(V)));
    prompts.push_back(p);
  }
  // Warm-up (weights into the caches, thread pool awake).
  run_level(e, prompts, 1, 8, false, kBlockDefault);

  nlohmann::ordered_json J, tok = nlohmann::ordered_json::object(), dtok = tok, ttft = tok, itl = tok,
                            dttft = tok, ditl = tok, dtau = tok;
  bool truths_known = false;
  for (int32_t c : b.levels) {
    const std::string k = std::to_string(c);
    std::vector<double> ts, tt, ti;
    RunFigures last;
    for (int r = 0; r < b.repeats; ++r) {
      note("concurrency " + k + ": target-only run " + std::to_string(r + 1));
      last = run_level(e, prompts, c, b.tokens, false, kBlockDefault);
      ts.push_back(last.tok_s);
      tt.push_back(last.ttft_ms);
      ti.push_back(last.itl_ms);
    }
    tok[k] = median(ts);
    ttft[k] = median(tt);
    itl[k] = median(ti);
    if (!has_draft) continue;
    if (!b.replay.empty() && !truths_known) {
      // The target-only outputs script the replayed acceptance (bench_proposers.h).
      RunFigures all = run_level(e, prompts, max_c, b.tokens, false, kBlockDefault);
      replay->set_lengths({});
      for (int32_t i = 0; i < max_c; ++i) replay->add_truth(prompts[size_t(i)], all.outputs[size_t(i)]);
      truths_known = true;
    }
    std::vector<double> ds, dt, di, dta;
    for (int r = 0; r < b.repeats; ++r) {
      note("concurrency " + k + ": DFlash run " + std::to_string(r + 1) + (b.replay.empty() ? "" : " (PROJECTED)"));
      replay->set_lengths(b.replay);
      replay->restart();
      const RunFigures f = run_level(e, prompts, c, b.tokens, true, b.block);
      replay->set_lengths({});
      ds.push_back(f.tok_s);
      dt.push_back(f.ttft_ms);
      di.push_back(f.itl_ms);
      dta.push_back(f.tau);
    }
    dtok[k] = median(ds);
    dttft[k] = median(dt);
    ditl[k] = median(di);
    dtau[k] = median(dta);
  }
  J["concurrency_levels"] = b.levels;
  J["concurrency_tokens_per_request"] = b.tokens;
  J["concurrency_tok_s"] = tok;
  J["concurrency_ttft_ms"] = ttft;
  J["concurrency_itl_ms"] = itl;
  if (has_draft) {
    J["concurrency_dflash_tok_s"] = dtok;
    J["concurrency_dflash_ttft_ms"] = dttft;
    J["concurrency_dflash_itl_ms"] = ditl;
    J["concurrency_dflash_tau"] = dtau;
    J["concurrency_dflash_block"] = b.block == kBlockAuto ? nlohmann::ordered_json("auto") : nlohmann::ordered_json(b.block);
    if (!b.replay.empty()) J["concurrency_dflash_assumed_tau"] = b.assume_tau;
  }
  const EngineMetrics m = e.metrics();
  J["kv_blocks_leaked"] = m.kv_blocks_used;
  J["preemptions"] = m.preemptions_total;
  return J;
}

}  // namespace dfl::cli
