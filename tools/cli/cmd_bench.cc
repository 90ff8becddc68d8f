// dflash bench: llama-bench-style speed report of one model folder (and optional drafter):
// machine rooflines, prefill, decode, the verify cost curve t(B)/t(1), drafter step time, DFlash
// end to end with the real drafter (measured τ), and PROJECTED DFlash speed for an assumed τ
// (replayed acceptance lengths through the real pipeline). Every figure is the median of
// --repeats runs, with its spread.
#include <algorithm>
#include <chrono>
#include <optional>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "args.h"
#include "run_common.h"
#include "bench_concurrency.h"
#include "pipeline_cli.h"
#include "bench_machine.h"
#include "bench_util.h"
#include "commands.h"
#include "core/error.h"
#include "engine/block_policy.h"
#include "bench_proposers.h"
#include "engine/calibrate.h"
#include "engine/model_assets.h"
#include "engine/generator.h"
#include "engine/scheduler.h"
#include "model/dflash_draft.h"
#include "model/gdn.h"
#include "spec/dflash_proposer.h"

namespace dfl::cli {

namespace {
const std::vector<FlagSpec> kFlags = with_pipeline_flags({
    {"--model", "DIR", "target model folder (config.json + safetensors)"},
    {"--draft", "DIR", "DFlash drafter: adds drafter step time, DFlash end-to-end, projections"},
    {"--threads", "N", "worker threads (default: all cores)"},
    {"--repeats", "R", "timed repeats per figure; the report gives medians and spread (default 3)"},
    {"--pp", "N,N", "prompt lengths for prefill (default 128,512)"},
    {"--tg", "N", "tokens generated for decode and the DFlash run (default 128)"},
    {"--tg-projected", "N", "tokens generated per projected (--assume-tau) run (default 256)"},
    {"--verify", "B,B", "verify block sizes of the cost curve (default 1,2,4,8,16)"},
    {"--verify-ctx", "N", "context before the verify block (default 128)"},
    {"--verify-logits", "", "time decode and verify with every row's logits (what sampling and "
                            "logprobs need) instead of greedy picks"},
    {"--block-size", "B", "DFlash block incl. the anchor: a number or auto (default: drafter's)"},
    {"--assume-tau", "T[,T]", "PROJECTED speedup: replay acceptance lengths with mean T per cycle "
                              "at the drafter's block (geometric per-position acceptance)"},
    {"--sweep", "B,B", "with --assume-tau: also run these fixed block sizes and auto, compared"},
    {"--weights", "FMT", "bf16 (default: as stored, prepacked where the machine has a faster "
                         "layout) | stored (no repacking) | q8 (int8 per-block, made at load)"},
    {"--kv-dtype", "T", "KV-cache element type: bf16 (default, as dflash run) | f32"},
    ggml_act_flag(),
    {"--bw-mib", "MiB", "buffer of the bandwidth test (default 1024)"},
    {"--skip", "LIST", "skip parts: machine,prefill,decode,verify,draft,dflash"},
    {"--concurrency", "C,C", "batched engine throughput with C requests at once (e.g. 1,4,16): "
                             "target-only and DFlash (with --assume-tau: PROJECTED); runs only this"},
    {"--json", "", "print one JSON object instead of the markdown report"},
    {"--json-out", "FILE", "also write the JSON object to FILE"},
    {"--help", "", "show this help"},
});

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

// The verify curve's tokens where the model has a tokenizer: plain English, so the rows' greedy
// picks see the peaked distributions of real text (random ids give flat ones, where the head
// screen finishes thousands of outputs per row or computes the row in full).
constexpr const char* kVerifyText =
    "The river runs through the middle of the old town, and most of the houses along its banks "
    "were built by the families who worked the mills upstream. In the spring the water rises "
    "quickly, so the lower streets have stone walls and heavy wooden gates that are closed when "
    "the snow in the hills begins to melt. Visitors often come in the summer, when the market "
    "fills the main square and the cafes put their tables out under the trees. The town hall, a "
    "tall building with a clock tower, holds a small museum about the history of the region: "
    "maps, tools from the mills, photographs of the great flood, and letters written by the "
    "people who rebuilt the bridges afterwards. Children from the local school visit it every "
    "year, and many of them later say it was the first time they understood how much work it "
    "takes to keep a place like this safe. The museum is open every day except Monday, and the "
    "guided tour takes about an hour.";

std::vector<int32_t> verify_text_tokens(const std::string& model) {
  try {
    const ModelAssets assets = ModelAssets::load(model);
    if (assets.tokenizer) return assets.tokenizer->encode(kVerifyText);
  } catch (const Error&) {
  }
  return {};
}

struct Row {
  std::string test, value, spread, roofline;
};

struct SpecRun {
  double tok_s = 0, tau = 0;
  Stat rate;
  std::vector<int64_t> lengths;  // draft length histogram (auto)
  // Inside the loop, per cycle (medians over the repeats): drafter (propose + context append),
  // target verify, and the whole cycle.
  double draft_ms = 0, verify_ms = 0, cycle_ms = 0;
};

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args args(kFlags, argc, argv, 2);
  if (args.has("--help")) {
    std::cout << usage("dflash bench --model DIR [--draft DIR] [--threads N] [--repeats R] "
                       "[--assume-tau T] [--json] [flags]",
                       kFlags);
    return 0;
  }
  DFL_CHECK(args.positional().empty(), "unexpected argument '",
            args.positional().empty() ? "" : args.positional()[0], "'");
  DFL_CHECK(args.has("--model"), "--model DIR is required");
  apply_ggml_act(args);
  const int threads = int(args.integer("--threads", hardware_threads()));
  DFL_CHECK(threads >= 1 && threads <= 1024, "--threads must be in [1, 1024]");
  const int R = int(args.integer("--repeats", 3));
  DFL_CHECK(R >= 1 && R <= 1000, "--repeats must be in [1, 1000]");
  const std::vector<int32_t> pps = parse_ints(args.str("--pp", "128,512"), "--pp");
  const int32_t tg = int32_t(args.integer("--tg", 128));
  const int32_t tg_proj = int32_t(args.integer("--tg-projected", 256));
  DFL_CHECK(tg >= 2 && tg_proj >= 2, "--tg and --tg-projected must be at least 2");
  std::vector<int32_t> vbs = parse_ints(args.str("--verify", "1,2,4,8,16"), "--verify");
  const int32_t vctx = int32_t(args.integer("--verify-ctx", 128));
  DFL_CHECK(vctx >= 0, "--verify-ctx must be >= 0");
  const bool auto_block = args.str("--block-size") == "auto";
  const int32_t block_flag = auto_block ? 0 : int32_t(args.integer("--block-size", 0));
  std::vector<double> taus;
  if (args.has("--assume-tau")) taus = parse_list(args.str("--assume-tau"), "--assume-tau");
  std::vector<int32_t> sweep;
  if (args.has("--sweep")) sweep = parse_ints(args.str("--sweep"), "--sweep");
  DFL_CHECK((taus.empty() && sweep.empty()) || args.has("--draft"),
            "--assume-tau and --sweep need --draft (the pipeline runs the real drafter)");
  DFL_CHECK(sweep.empty() || !taus.empty(), "--sweep needs --assume-tau");
  const std::string wname = args.str("--weights", "bf16");
  DFL_CHECK(wname == "bf16" || wname == "q8" || wname == "stored", "--weights must be bf16, stored or q8");
  const WeightsFormat wfmt = wname == "q8" ? WeightsFormat::kQ8 : WeightsFormat::kAsStored;
  LoadOptions lo;
  lo.weights_format = wfmt;
  lo.prepack = wname != "stored";
  const KvDtype kv_dt = parse_kv_dtype(args);
  lo.kv_dtype = kv_dt;
  const std::string skip = "," + args.str("--skip") + ",";
  auto run_part = [&](const char* p) {
    std::string key = ",";
    key += p;
    key += ',';
    return skip.find(key) == std::string::npos;
  };
  const bool as_json = args.has("--json");
  // Greedy decode and verify need only each row's pick (the engine asks for nothing more for a
  // greedy request without logprobs); --verify-logits times the all-logits form.
  const bool picks_only = !args.has("--verify-logits");
  DFL_CHECK(!args.has("--pipeline-parallel") || args.has("--concurrency"),
            "bench --pipeline-parallel measures the engine: it needs --concurrency");
  if (args.has("--concurrency")) {
    ConcurrencyBench cb;
    cb.engine.model_dir = args.str("--model");
    cb.engine.draft_dir = args.str("--draft");
    cb.engine.threads = threads;
    cb.engine.weights_format = wfmt;
    cb.engine.prepack = lo.prepack;
    cb.engine.kv_dtype = kv_dt;
    cb.engine.calibrate = auto_block;
    add_pipeline_target(args, cb.engine);
    if (run_pipeline_worker(args, threads)) return 0;  // a stage of `mpirun ... --pipeline-parallel N`
    cb.levels = parse_ints(args.str("--concurrency"), "--concurrency");
    cb.tokens = tg;
    cb.repeats = R;
    cb.block = auto_block ? kBlockAuto : block_flag;
    if (!taus.empty()) {
      const int32_t B = load_model_config(args.str("--draft")).dflash->block_size;
      cb.assume_tau = taus.front();
      DFL_CHECK(cb.assume_tau >= 1.0 && cb.assume_tau <= B, "--assume-tau must be in [1, ", B, "]");
      cb.replay = replay_lengths(cb.assume_tau, B - 1, nullptr);
    }
    nlohmann::ordered_json J = run_concurrency_bench(cb, [&](const std::string& s) {
      if (!as_json) std::fprintf(stderr, "[bench] %s\n", s.c_str());
    });
    J["cpu"] = cpu_model_name();
    J["isa"] = isa_description();
    J["threads"] = threads;
    J["date_utc"] = now_utc();
    J["loadavg"] = loadavg();
    if (args.has("--json-out")) {
      std::ofstream f(args.str("--json-out"));
      f << J.dump(2) << "\n";
    }
    if (as_json) {
      std::cout << J.dump(2) << "\n";
    } else {
      std::printf("| concurrency | target-only tok/s | TTFT ms | ITL ms |%s\n",
                  J.contains("concurrency_dflash_tok_s") ? " DFlash tok/s | DFlash ITL ms | tau | DFlash / target |" : "");
      for (int32_t c : cb.levels) {
        const std::string k = std::to_string(c);
        std::printf("| %d | %.1f | %.1f | %.2f |", c, J["concurrency_tok_s"][k].get<double>(),
                    J["concurrency_ttft_ms"][k].get<double>(), J["concurrency_itl_ms"][k].get<double>());
        if (J.contains("concurrency_dflash_tok_s"))
          std::printf(" %.1f | %.2f | %.2f | %.2fx |", J["concurrency_dflash_tok_s"][k].get<double>(),
                      J["concurrency_dflash_itl_ms"][k].get<double>(), J["concurrency_dflash_tau"][k].get<double>(),
                      J["concurrency_dflash_tok_s"][k].get<double>() / std::max(1e-9, J["concurrency_tok_s"][k].get<double>()));
        std::printf("\n");
      }
      std::printf("kv_blocks_leaked: %lld\n", (long long)J["kv_blocks_leaked"].get<int64_t>());
    }
    return 0;
  }
  auto note = [&](const std::string& s) {
    std::fprintf(stderr, "[bench] %s\n", s.c_str());
    std::fflush(stderr);
  };

  ThreadPool pool(threads);
  json J;
  std::vector<Row> rows;
  J["model"] = args.str("--model");
  if (args.has("--draft")) J["draft"] = args.str("--draft");
  J["threads"] = threads;
  J["weights"] = wname;
  J["kv_dtype"] = kv_dtype_name(kv_dt);
  J["ggml_act"] = ggml_activations_name(ggml_activations());
  J["cpu"] = cpu_model_name();
  J["isa"] = isa_description();
  J["date"] = now_utc();
  J["loadavg_start"] = loadavg();
  J["repeats"] = R;

  // ---- machine ---------------------------------------------------------------------------
  double bw_gbs = 0, peak_gflops = 0;
  const size_t bw_mib = size_t(args.integer("--bw-mib", 1024));
  if (run_part("machine")) {
    const size_t mib = bw_mib;
    note("memory read bandwidth (" + std::to_string(mib) + " MiB)");
    const Stat bw = measure_read_bandwidth(pool, mib << 20, std::max(R, 5));
    // The roofline is the fastest pass (on a shared machine the median is a pessimistic probe:
    // neighbours take bandwidth in bursts); the decode part probes again and keeps the best.
    bw_gbs = bw.max;
    int best_m = 0;
    note("matmul peak");
    const Stat pk = measure_matmul_peak(pool, lo, std::max(R, 5), &best_m);
    peak_gflops = pk.median;
    J["bandwidth_gbs"] = bw.median;
    J["bandwidth_spread_pct"] = bw.spread_pct();
    J["matmul_peak_gflops"] = pk.median;
    J["matmul_peak_spread_pct"] = pk.spread_pct();
    J["matmul_peak_rows"] = best_m;
    J["bandwidth_best_gbs"] = bw.max;
    rows.push_back({"memory read bandwidth (" + std::to_string(mib) + " MiB, one pass)",
                    fmt("%.1f GB/s", bw.median), fmt("%.1f%%", bw.spread_pct()),
                    fmt("best pass %.1f GB/s", bw.max)});
    rows.push_back({str("matmul peak (", wname, ", M=", best_m, ", 4096x1024)"),
                    fmt("%.0f GFLOP/s", pk.median), fmt("%.1f%%", pk.spread_pct()), "—"});
  }

  // ---- target ----------------------------------------------------------------------------
  int32_t draft_block = 16;
  std::optional<ModelConfig> dcfg;
  if (args.has("--draft")) {
    dcfg = load_model_config(args.str("--draft"));
    DFL_CHECK(dcfg->dflash.has_value(), "'", args.str("--draft"), "' is not a DFlash drafter");
    draft_block = dcfg->dflash->block_size;
  }
  const int32_t spec_block = block_flag > 0 ? std::min(block_flag, draft_block) : draft_block;
  int32_t max_b = std::max(draft_block, spec_block);
  for (int32_t b : vbs) max_b = std::max(max_b, b);
  for (int32_t b : sweep) max_b = std::max(max_b, b);
  int32_t max_pp = 0;
  for (int32_t n : pps) max_pp = std::max(max_pp, n);
  const int32_t kSpecPrompt = 32;
  // The ring slack of sliding-window layers bounds the rows of one forward: the engine's
  // prefill chunk, as `dflash run` / `serve` load it, so ppN measures what they prefill with.
  lo.max_block = std::max(max_b, SchedulerOptions{}.prefill_chunk);
  lo.max_context = std::max({max_pp + 8, vctx + max_b + 8, tg + 8,
                             kSpecPrompt + std::max(tg, tg_proj) + 2 * max_b + 8});
  note("loading " + args.str("--model") + (wfmt == WeightsFormat::kQ8 ? " (quantizing to q8)" : ""));
  auto tl0 = Clock::now();
  std::unique_ptr<CausalLM> target = load_causal_lm(args.str("--model"), lo, pool);
  J["load_s"] = std::chrono::duration<double>(Clock::now() - tl0).count();
  const ModelConfig& tc = target->config();
  const int32_t V = tc.vocab_size;
  const double bytes_tok = double(target->weight_bytes_per_token(picks_only));
  J["architecture"] = tc.architecture;
  J["weights_bytes_per_token"] = int64_t(bytes_tok);
  KvPool& kv = target->kv();

  // Matmul FLOPs per token (2 per weight) and attention FLOPs (QKᵀ and PV over the context).
  double w_params = 0;  // weights in the layers' matmuls (the lm_head counted apart)
  for (const auto& l : tc.layers) {
    const double H = tc.hidden_size, qd = double(l.n_heads) * l.head_dim,
                 kd = double(l.n_kv_heads) * l.head_dim, vd = double(l.n_kv_heads) * l.v_head_dim,
                 od = double(l.n_heads) * l.v_head_dim;
    w_params += H * (qd + kd + vd) + od * H + 3.0 * H * tc.intermediate_size;
  }
  auto attn_flops = [&](double n_ctx_sum) {  // Σ over tokens of their visible context
    double f = 0;
    for (const auto& l : tc.layers) f += 2.0 * l.n_heads * (l.head_dim + l.v_head_dim) * n_ctx_sum;
    return f;
  };
  const double head_flops = 2.0 * double(V) * tc.hidden_size;

  ForwardArgs fa;
  ForwardOut fo;
  fa.seq = 0;

  // ---- prefill ---------------------------------------------------------------------------
  if (run_part("prefill")) {
    json pj = json::object(), ps = json::object(), pr = json::object();
    for (int32_t n : pps) {
      note(str("prefill pp", n));
      const std::vector<int32_t> toks = random_tokens(n, V, 1000 + n);
      const Stat t = time_repeats(R, 1, [&] {
        kv.clear(0);
        fa.tokens = toks.data();
        fa.n = n;
        fa.pos0 = 0;
        fa.logits = LogitsMode::kLast;
        fa.aux = nullptr;
        target->forward(fa, fo);
      });
      kv.clear(0);
      const Stat r = rate(t, n);
      const double flops = n * 2.0 * w_params + attn_flops(0.5 * double(n) * (n + 1)) + head_flops;
      const double gf = flops / t.median / 1e9;
      pj[std::to_string(n)] = r.median;
      ps[std::to_string(n)] = r.spread_pct();
      pr[std::to_string(n)] = peak_gflops > 0 ? gf / peak_gflops : 0.0;
      std::string roof = fmt("%.0f GFLOP/s", gf);
      if (peak_gflops > 0) roof += fmt(" = %.0f%% of matmul peak", 100 * gf / peak_gflops);
      rows.push_back({str("pp", n), fmt("%.1f tok/s", r.median), fmt("%.1f%%", r.spread_pct()), roof});
    }
    J["prefill_tok_s"] = pj;
    J["prefill_spread_pct"] = ps;
    J["prefill_peak_fraction"] = pr;
  }

  // ---- decode ----------------------------------------------------------------------------
  double decode_tok_s = 0;
  if (run_part("decode")) {
    note(str("decode tg", tg));
    auto decode = [&](int32_t n) {
      kv.clear(0);
      int32_t tok = 1;
      fa.aux = nullptr;
      fa.logits = LogitsMode::kLast;
      fa.argmax_only = picks_only;
      for (int32_t i = 0; i < n; ++i) {
        fa.tokens = &tok;
        fa.n = 1;
        fa.pos0 = i;
        target->forward(fa, fo);
        tok = picks_only ? fo.argmax[0] : int32_t(ops::argmax(fo.logits.data(), V));
      }
      fa.argmax_only = false;
    };
    decode(8);  // warm-up
    const ops::ArgmaxStats s0 = ops::argmax_stats();
    const Stat t = time_repeats(R, 0, [&] { decode(tg); });
    const ops::ArgmaxStats s1 = ops::argmax_stats();
    kv.clear(0);
    const Stat r = rate(t, tg);
    // The head's bytes as the timed steps read them: a step screened on the plane streams the
    // plane; a step that computed its logits (no screen, the screen stepping aside, a row it gave
    // up) or was screened on the weights themselves streams the weights. (A flat random head
    // makes the screen step aside: counting its plane alone would understate the stream.)
    double decode_bytes = bytes_tok;
    if (picks_only && s1.rows > s0.rows) {
      const CausalLM::StepBytes sb = target->weight_bytes_per_step();
      const double steps = double(s1.rows - s0.rows);
      decode_bytes = double(sb.body) + double(sb.head_plane) * double(s1.plane_rows - s0.plane_rows) / steps +
                     double(sb.head) * double(s1.weight_rows - s0.weight_rows) / steps;
      J["decode_bytes_per_token"] = int64_t(decode_bytes);
      J["decode_head_weight_reads"] = double(s1.weight_rows - s0.weight_rows) / steps;
    }
    decode_tok_s = r.median;
    J["decode_tok_s"] = r.median;
    J["decode_spread_pct"] = r.spread_pct();
    J["decode_ms_per_token"] = 1e3 / r.median;
    if (bw_gbs > 0) {  // the same probe right after the decode: the roofline is the best seen
      bw_gbs = std::max(bw_gbs, measure_read_bandwidth(pool, bw_mib << 20, 5).max);
      J["bandwidth_best_gbs"] = bw_gbs;
    }
    const double roof = bw_gbs > 0 ? bw_gbs * 1e9 / decode_bytes : 0;
    if (roof > 0) {
      J["decode_roofline_tok_s"] = roof;
      J["decode_roofline_fraction"] = r.median / roof;
    }
    rows.push_back({str("tg", tg), fmt("%.2f tok/s", r.median), fmt("%.1f%%", r.spread_pct()),
                    roof > 0 ? fmt("%.0f%% of bandwidth roofline", 100 * r.median / roof) +
                                   fmt(" (%.1f tok/s at ", roof) + fmt("%.2f GB/token read)", decode_bytes / 1e9)
                             : "—"});
  }

  // ---- drafter ---------------------------------------------------------------------------
  std::unique_ptr<DFlashProposer> proposer;
  if (dcfg) {
    note("loading drafter " + args.str("--draft"));
    auto drafter = std::make_unique<DFlashDraftModel>(args.str("--draft"), *target, lo, pool);
    J["draft_weights_bytes"] = drafter->weight_bytes();
    proposer = std::make_unique<DFlashProposer>(std::move(drafter), *target);
  }
  const std::vector<int32_t>* aux = proposer ? &proposer->target_aux() : nullptr;

  // ---- verify cost curve -----------------------------------------------------------------
  std::vector<double> tcurve;
  if (run_part("verify")) {
    std::vector<int32_t> bs = vbs;
    if (proposer) {
      bs.push_back(spec_block);
      for (int32_t b : sweep) bs.push_back(b);
    }
    std::sort(bs.begin(), bs.end());
    bs.erase(std::unique(bs.begin(), bs.end()), bs.end());
    note("verify cost curve");
    const std::vector<int32_t> text = verify_text_tokens(args.str("--model"));
    J["verify_tokens"] = text.empty() ? "synthetic ids" : "English text";
    tcurve = measure_verify_curve(*target, 0, bs, vctx, R, aux, picks_only, text.empty() ? nullptr : &text);
    json vc = json::object(), vm = json::object();
    const double t1 = tcurve.size() > 1 && tcurve[1] > 0 ? tcurve[1] : 0;
    for (int32_t b : bs) {
      vm[std::to_string(b)] = tcurve[b] * 1e3;
      if (t1 > 0) vc[std::to_string(b)] = tcurve[b] / t1;
    }
    if (t1 > 0) J["verify_cost"] = vc;
    J["verify_ms"] = vm;
    J["verify_context"] = vctx;
    J["verify_output"] = picks_only ? "greedy picks" : "all logits";
    for (int32_t b : vbs) {
      const double gf = (b * 2.0 * w_params + b * head_flops + attn_flops(double(b) * (vctx + 0.5 * (b + 1)))) /
                        tcurve[b] / 1e9;
      rows.push_back({str("verify t(", b, ")"), fmt("%.2f ms", tcurve[b] * 1e3), "",
                      (t1 > 0 ? fmt("t(B)/t(1) = %.2f", tcurve[b] / t1) : std::string("")) +
                          fmt(", %.0f GFLOP/s", gf)});
    }
  }

  // ---- how the greedy picks went (ops::matmul_argmax's screen) -----------------------------
  if (picks_only) {
    const ops::ArgmaxStats st = ops::argmax_stats();
    const uint64_t all = st.screened_rows + st.full_rows;
    if (all > 0) {
      J["argmax_screened_rows"] = st.screened_rows;
      J["argmax_full_rows"] = st.full_rows;
      J["argmax_candidates_per_row"] = st.screened_rows ? double(st.candidates) / st.screened_rows : 0.0;
      rows.push_back({"greedy picks (head screen)",
                      fmt("%.1f outputs finished per row", st.screened_rows ? double(st.candidates) / st.screened_rows : 0.0),
                      "", fmt("%.1f%% of ", 100.0 * st.full_rows / all) + str(all, " rows computed in full")});
    }
  }

  // ---- recurrent-state rollback (Gated DeltaNet targets) ----------------------------------
  // After a verify of the largest block B at the verify context, the rollback to a accepted
  // drafts (replay of a + 1 rows from the pre-verify buffer; a = B − 1 keeps the whole block and
  // costs nothing), as a fraction of t(B). Each repeat continues from where the last left off.
  if (run_part("verify") && n_recurrent_layers(target->config()) > 0 && !tcurve.empty()) {
    const int32_t B = int32_t(tcurve.size()) - 1;
    note("recurrent rollback");
    const int32_t V = target->config().vocab_size;
    std::vector<int32_t> toks(size_t(std::max(vctx, B)));
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = int32_t((i * 7919 + 13) % V);
    ForwardArgs fa;
    ForwardOut fo;
    target->release(0);
    fa.tokens = toks.data();
    fa.n = vctx;
    fa.logits = LogitsMode::kNone;
    if (vctx > 0) target->forward(fa, fo);
    int32_t len = vctx;
    json rj = json::object();
    for (int32_t a : {0, B / 2 - 1, B - 2}) {
      if (a < 0) continue;
      std::vector<double> ts;
      for (int32_t r = 0; r < R + 1 && len + B <= target->max_context(); ++r) {
        fa.tokens = toks.data();
        fa.n = B;
        fa.pos0 = len;
        fa.logits = LogitsMode::kAll;
        target->forward(fa, fo);
        const auto t0 = std::chrono::steady_clock::now();
        target->rollback(0, len + a + 1);
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        len += a + 1;
        if (r > 0) ts.push_back(dt);
      }
      if (ts.empty()) continue;
      const Stat st = summarize(ts);
      rj[std::to_string(a)] = {{"ms", st.median * 1e3}, {"fraction_of_verify", st.median / tcurve[B]}};
      rows.push_back({str("rollback after t(", B, "), ", a, " accepted"), fmt("%.2f ms", st.median * 1e3), "",
                      fmt("%.2f%%", 100 * st.median / tcurve[B]) + str(" of t(", B, ")")});
    }
    target->release(0);
    J["recurrent_rollback"] = rj;
  }

  // ---- drafter step ----------------------------------------------------------------------
  std::vector<double> dcurve;  // drafter step time by block size B (index), 0 = not measured
  if (proposer && run_part("draft")) {
    note("drafter step");
    const std::vector<int32_t> ctx = random_tokens(vctx, V, 77);
    kv.clear(0);
    proposer->reset(0);
    fa.tokens = ctx.data();
    fa.n = vctx;
    fa.pos0 = 0;
    fa.logits = LogitsMode::kNone;
    fa.aux = aux;
    if (vctx > 0) {
      target->forward(fa, fo);
      proposer->add_context(0, fo.aux.data(), vctx, 0);
    }
    SamplingParams sp;
    Rng rng(0);
    Draft d;
    const int32_t anchor_pos = vctx;
    const Stat t = time_repeats(R, 1, [&] {
      proposer->propose(0, 5, anchor_pos, spec_block - 1, sp, rng, d);
    });
    // The drafter's cost at the other block sizes (for the auto policy and the sweep's ideals).
    dcurve.assign(max_b + 1, 0.0);
    dcurve[spec_block] = t.median;
    std::vector<int32_t> dbs = vbs;
    dbs.insert(dbs.end(), sweep.begin(), sweep.end());
    for (int32_t b : dbs)
      if (b >= 2 && b <= proposer->max_draft() + 1 && dcurve[b] == 0)
        dcurve[b] = time_repeats(R, 1, [&] { proposer->propose(0, 5, anchor_pos, b - 1, sp, rng, d); }).median;
    json dj = json::object();
    for (int32_t b = 2; b <= max_b; ++b)
      if (dcurve[b] > 0) dj[std::to_string(b)] = dcurve[b] * 1e3;
    J["draft_ms_by_block"] = dj;
    // Context append of a typical accepted run (the per-cycle taps → fc → K/V cost).
    const int32_t n_ctx = std::min<int32_t>(7, spec_block);
    fa.tokens = ctx.data();
    fa.n = n_ctx;
    fa.pos0 = vctx;
    fa.logits = LogitsMode::kNone;
    target->forward(fa, fo);
    const Stat tc2 = time_repeats(R, 1, [&] {
      proposer->drafter().kv().truncate(0, vctx);
      proposer->add_context(0, fo.aux.data(), n_ctx, vctx);
    });
    kv.clear(0);
    proposer->reset(0);
    J["draft_ms_per_block"] = t.median * 1e3;
    J["draft_spread_pct"] = t.spread_pct();
    J["draft_block"] = spec_block;
    J["draft_context_ms"] = tc2.median * 1e3;
    rows.push_back({str("drafter step (B=", spec_block, ")"), fmt("%.2f ms", t.median * 1e3),
                    fmt("%.1f%%", t.spread_pct()),
                    tcurve.size() > size_t(1) && tcurve[1] > 0 ? fmt("%.2f x t(1)", t.median / tcurve[1]) : ""});
    rows.push_back({str("drafter context append (", n_ctx, " rows)"), fmt("%.2f ms", tc2.median * 1e3),
                    fmt("%.1f%%", tc2.spread_pct()), ""});
  }

  // ---- DFlash end to end -----------------------------------------------------------------
  auto spec_run = [&](int32_t block, bool use_auto, const std::vector<int32_t>* replay,
                      int32_t n_tokens) {
    GenerateRequest req;
    req.prompt = random_tokens(kSpecPrompt, V, 4242);
    req.max_tokens = n_tokens;
    req.block_size = use_auto ? kBlockAuto : block;
    if (use_auto) req.verify_cost = tcurve;
    std::unique_ptr<ReplayProposer> replayer;
    if (replay) {
      // The target's own continuation scripts the replayed acceptance (bench_proposers.h).
      Generator plain(*target, nullptr);
      const GenerateResult truth = plain.generate(req);
      replayer = std::make_unique<ReplayProposer>(*proposer, *replay, V);
      replayer->add_truth(req.prompt, truth.tokens);
    }
    Generator gen(*target, replay ? static_cast<Proposer*>(replayer.get()) : proposer.get());
    std::vector<double> tr, tau, dms, vms, cms;
    std::vector<int64_t> hist;
    for (int r = 0; r < R; ++r) {  // (warm already: the verify and drafter parts ran first)
      if (replayer) replayer->restart();
      const GenerateResult res = gen.generate(req);
      tr.push_back(res.decode_s / std::max(1, res.stats.generated_tokens - 1));
      tau.push_back(res.stats.mean_acceptance_length());
      hist = res.stats.draft_length_histogram;
      const double cyc = double(std::max<int64_t>(1, res.stats.target_passes));
      dms.push_back(1e3 * res.stats.draft_s / cyc);
      vms.push_back(1e3 * res.stats.verify_s / cyc);
      cms.push_back(1e3 * res.decode_s / cyc);
    }
    SpecRun out;
    out.draft_ms = summarize(dms).median;
    out.verify_ms = summarize(vms).median;
    out.cycle_ms = summarize(cms).median;
    out.rate = rate(summarize(tr), 1.0);
    out.tok_s = out.rate.median;
    out.tau = summarize(tau).median;
    out.lengths = hist;
    kv.clear(0);
    proposer->reset(0);
    return out;
  };

  if (proposer && run_part("dflash")) {
    note(str("DFlash end to end (real drafter, B=", auto_block ? std::string("auto") : std::to_string(spec_block), ")"));
    const SpecRun s = spec_run(spec_block, auto_block, nullptr, tg);
    J["tau"] = s.tau;
    J["dflash_tok_s"] = s.tok_s;
    J["dflash_spread_pct"] = s.rate.spread_pct();
    J["dflash_block"] = auto_block ? json("auto") : json(spec_block);
    J["dflash_loop_ms_per_cycle"] = {{"draft", s.draft_ms}, {"verify", s.verify_ms}, {"cycle", s.cycle_ms}};
    if (decode_tok_s > 0) J["speedup_vs_target"] = s.tok_s / decode_tok_s;
    rows.push_back({str("DFlash e2e, real drafter (B=", auto_block ? std::string("auto") : std::to_string(spec_block),
                        ", measured tau=", fmt("%.2f", s.tau), ")"),
                    fmt("%.2f tok/s", s.tok_s), fmt("%.1f%%", s.rate.spread_pct()),
                    decode_tok_s > 0 ? fmt("%.2fx target decode (measured)", s.tok_s / decode_tok_s) : ""});
  }

  // ---- projected (replayed acceptance) ----------------------------------------------------
  if (proposer && !taus.empty()) {
    json pj = json::array();
    for (double tau : taus) {
      DFL_CHECK(tau >= 1.0 && tau <= proposer->max_draft() + 1, "--assume-tau ", tau,
                " is outside [1, block size ", proposer->max_draft() + 1, "]");
      double alpha = 0;
      const std::vector<int32_t> L = replay_lengths(tau, proposer->max_draft(), &alpha);
      auto one = [&](int32_t block, bool use_auto) {
        note(str("PROJECTED tau=", tau, " B=", use_auto ? std::string("auto") : std::to_string(block)));
        const SpecRun s = spec_run(block, use_auto, &L, tg_proj);
        json o;
        o["assumed_tau"] = tau;
        o["alpha"] = alpha;
        o["block"] = use_auto ? json("auto") : json(block);
        o["tau"] = s.tau;
        o["tok_s"] = s.tok_s;
        o["spread_pct"] = s.rate.spread_pct();
        o["loop_draft_ms_per_cycle"] = s.draft_ms;
        o["loop_verify_ms_per_cycle"] = s.verify_ms;
        o["loop_cycle_ms"] = s.cycle_ms;
        // Pipeline efficiency from the loop's own timings (immune to load drifting between the
        // separate component measurements and the run): component time / cycle time.
        if (s.cycle_ms > 0) o["loop_component_fraction"] = (s.draft_ms + s.verify_ms) / s.cycle_ms;
        if (decode_tok_s > 0) o["projected_speedup"] = s.tok_s / decode_tok_s;
        if (!use_auto && block < int32_t(dcurve.size()) && dcurve[block] > 0 &&
            block < int32_t(tcurve.size()) && tcurve[block] > 0 && tcurve[1] > 0) {
          const double ideal = s.tau * tcurve[1] / (dcurve[block] + tcurve[block]);
          o["ideal_speedup"] = ideal;
          if (decode_tok_s > 0) o["fraction_of_ideal"] = s.tok_s / decode_tok_s / ideal;
        }
        if (use_auto) o["draft_length_histogram"] = s.lengths;
        return o;
      };
      json main = one(spec_block, auto_block);
      pj.push_back(main);
      if (tau == taus.front() && main.contains("projected_speedup"))
        J["projected_speedup"] = main["projected_speedup"];
      std::string roof = main.contains("projected_speedup")
                             ? fmt("PROJECTED %.2fx target decode", main["projected_speedup"].get<double>())
                             : std::string("PROJECTED");
      if (main.contains("fraction_of_ideal"))
        roof += fmt("; %.0f%% of ideal ", 100 * main["fraction_of_ideal"].get<double>()) +
                fmt("tau*t(1)/(t_draft+t(B)) = %.2fx", main["ideal_speedup"].get<double>());
      roof += fmt("; in loop per cycle: draft %.1f ms", main["loop_draft_ms_per_cycle"].get<double>()) +
              fmt(" + verify %.1f ms", main["loop_verify_ms_per_cycle"].get<double>()) +
              fmt(" of %.1f ms", main["loop_cycle_ms"].get<double>());
      rows.push_back({str("PROJECTED assume-tau ", fmt("%.2g", tau), " (B=",
                          auto_block ? std::string("auto") : std::to_string(spec_block), ", replayed tau=",
                          fmt("%.2f", main["tau"].get<double>()), ")"),
                      fmt("%.2f tok/s", main["tok_s"].get<double>()),
                      fmt("%.1f%%", main["spread_pct"].get<double>()), roof});
      if (!sweep.empty()) {
        json sw = json::array();
        double best = 0;
        int32_t best_b = 0;
        for (int32_t b : sweep) {
          json o = one(b, false);
          if (o["tok_s"].get<double>() > best) {
            best = o["tok_s"].get<double>();
            best_b = b;
          }
          sw.push_back(o);
        }
        json a = one(spec_block, true);
        sw.push_back(a);
        const double ratio = best > 0 ? a["tok_s"].get<double>() / best : 0;
        json summary = {{"assumed_tau", tau}, {"best_fixed_block", best_b}, {"best_fixed_tok_s", best},
                        {"auto_tok_s", a["tok_s"]}, {"auto_over_best", ratio}, {"runs", sw}};
        J["sweep"].push_back(summary);
        for (const auto& o : sw)
          rows.push_back({str("  sweep tau ", fmt("%.2g", tau), " B=",
                              o["block"].is_string() ? o["block"].get<std::string>() : std::to_string(o["block"].get<int>()),
                              " (replayed tau=", fmt("%.2f", o["tau"].get<double>()), ")"),
                          fmt("%.2f tok/s", o["tok_s"].get<double>()), fmt("%.1f%%", o["spread_pct"].get<double>()),
                          o.contains("projected_speedup")
                              ? fmt("PROJECTED %.2fx", o["projected_speedup"].get<double>()) +
                                    (o["block"].is_string() ? fmt("; auto / best fixed (B=%.0f)", best_b) + fmt(" = %.3f", ratio) : "")
                              : ""});
      }
    }
    J["projected"] = pj;
  }
  // ---- q8 logit error against the stored weights -----------------------------------------
  if (wfmt == WeightsFormat::kQ8 && run_part("q8err")) {
    note("q8 logit error vs the stored weights");
    const int32_t n = 64;
    const std::vector<int32_t> toks = random_tokens(n, V, 99);
    auto logits_of = [&](CausalLM& m, std::vector<float>& out) {
      m.kv().clear(0);
      ForwardArgs a;
      a.tokens = toks.data();
      a.n = n;
      a.logits = LogitsMode::kAll;
      ForwardOut o;
      m.forward(a, o);
      m.kv().clear(0);
      out = std::move(o.logits);
    };
    std::vector<float> lq, lr;
    logits_of(*target, lq);
    LoadOptions ro = lo;
    ro.weights_format = WeightsFormat::kAsStored;
    ro.prepack = false;
    {
      std::unique_ptr<CausalLM> ref = load_causal_lm(args.str("--model"), ro, pool);
      logits_of(*ref, lr);
    }
    double se = 0, sr = 0, mx = 0;
    int agree = 0;
    for (int32_t r = 0; r < n; ++r) {
      const float* a = lq.data() + size_t(r) * V;
      const float* b = lr.data() + size_t(r) * V;
      for (int32_t i = 0; i < V; ++i) {
        const double dd = double(a[i]) - double(b[i]);
        se += dd * dd;
        sr += double(b[i]) * b[i];
        mx = std::max(mx, std::abs(dd));
      }
      agree += ops::argmax(a, V) == ops::argmax(b, V);
    }
    J["q8_logit_rel_rms_error"] = std::sqrt(se / std::max(sr, 1e-30));
    J["q8_logit_max_abs_error"] = mx;
    J["q8_top1_agreement"] = double(agree) / n;
    rows.push_back({str("q8 logits vs stored weights (", n, " positions)"),
                    fmt("rel. RMS error %.4f", std::sqrt(se / std::max(sr, 1e-30))), "",
                    fmt("max abs error %.4f", mx) + fmt(", top-1 agreement %.0f%%", 100.0 * agree / n)});
  }
  J["loadavg_end"] = loadavg();
  // A GGUF file's quantized types are kept as stored unless --weights q8 (the bf16 default names
  // the HF-folder path).
  if (tc.gguf && wname != "q8") J["weights"] = "as stored (GGUF)";

  if (args.has("--json-out")) {
    std::ofstream out(args.str("--json-out"));
    DFL_CHECK(out.good(), "cannot write '", args.str("--json-out"), "'");
    out << J.dump(2) << "\n";
  }
  if (as_json) {
    std::cout << J.dump(2) << "\n";
    return 0;
  }
  std::printf("## dflash bench: %s%s\n\n", args.str("--model").c_str(),
              args.has("--draft") ? (" + " + args.str("--draft")).c_str() : "");
  const std::string wlabel = J["weights"].get<std::string>();
  std::printf("%s | %s | %d threads | weights %s | KV %s | GGUF activations %s | decode/verify: %s | %s | load avg %s → %s\n",
              J["cpu"].get<std::string>().c_str(), J["isa"].get<std::string>().c_str(), threads,
              wlabel.c_str(), kv_dtype_name(kv_dt), ggml_activations_name(ggml_activations()), picks_only ? "greedy picks" : "all logits",
              J["date"].get<std::string>().c_str(),
              J["loadavg_start"].get<std::string>().c_str(), J["loadavg_end"].get<std::string>().c_str());
  std::printf("%s, %d layers, hidden %d, vocab %d: %.3f GB of weights read per decoded token; "
              "median of %d repeats, ± = half the min–max range\n\n",
              tc.architecture.c_str(), tc.n_layers, tc.hidden_size, V, bytes_tok / 1e9, R);
  std::printf("| test | value | ± | roofline / ratio |\n|---|---:|---:|---|\n");
  for (const auto& r : rows)
    std::printf("| %s | %s | %s | %s |\n", r.test.c_str(), r.value.c_str(), r.spread.c_str(), r.roofline.c_str());
  return 0;
}

}  // namespace dfl::cli
