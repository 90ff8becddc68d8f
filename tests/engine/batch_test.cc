// The batched engine is lossless and reproducible in any batch: every request's tokens are
// bit-identical to running it alone (target-only or with DFlash, T = 0, and T > 0 with a seed at a
// fixed block size), whatever shares its steps and whenever it arrives — with randomized arrival
// schedules, chunked prefill under a small token budget, mixed speculation on/off and block sizes,
// on every fixture family; also under a KV budget so small that requests get preempted and
// recomputed. After every run the KV pools are empty (no leaked pages). Plus cancel, refusals and
// stop strings.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>

#include "common/golden.h"
#include "engine/engine.h"
#include "kv/recurrent_state.h"
#include "model/gdn.h"
#include "tokenizer/tokenizer.h"

namespace dfl {
namespace {

struct Family {
  std::string name, target, draft;  // draft empty: target-only family
};

std::vector<Family> families() {
  std::vector<Family> v;
  for (const char* n : {"zlab_full", "mimo_style", "mixed_swa", "dflash2_noncausal"}) {
    const auto meta = test::read_json(test::fixture(std::string("dflash/") + n + "/meta.json"));
    v.push_back({n, test::repo_root() + "/" + meta.at("target").get<std::string>(),
                 test::fixture(std::string("dflash/") + n + "/draft")});
  }
  v.push_back({"default", test::fixture("default/target"), test::fixture("default/draft")});
  v.push_back({"mimo_flash_split", test::fixture("mimo/flash_split"), ""});
  v.push_back({"mimo_v25_fused", test::fixture("mimo/v25_fused"), ""});
  v.push_back({"qwen35_flat", test::fixture("qwen35/flat_untied"),
               test::fixture("qwen35/flat_untied_draft")});
  v.push_back({"qwen35_nested", test::fixture("qwen35/nested_tied"), ""});
  // DFlash2 (convolutions per job's block, the selector per job's rows of a batched pass).
  v.push_back({"dflash2_zlab_swa", test::fixture("qwen3/sharded"), test::fixture("dflash2/zlab_swa/draft")});
  // Gemma 4 (appended: tests above index the list): dense + its gemma-4-style drafter, and MoE.
  v.push_back({"gemma4_mixed", test::fixture("gemma4/dense_v5"), test::fixture("dflash/gemma4_mixed/draft")});
  v.push_back({"gemma4_moe", test::fixture("gemma4/moe_hub"), ""});
  // Reduced-vocabulary drafters (speculators d2t: own lm_head, drafts mapped back to target ids),
  // on the Qwen3 and the Qwen3.5 hybrid targets.
  v.push_back({"speculators_d2t", test::fixture("qwen3/tied_gqa2"), test::fixture("dflash/speculators_d2t/draft")});
  v.push_back({"speculators_d2t_qwen35", test::fixture("qwen35/flat_untied"),
               test::fixture("dflash/speculators_d2t_qwen35/draft")});
  return v;
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  RequestStats stats;
  std::string text;
  bool done = false;
};

// Attaches a callback that records into `out`.
Request recorded(Request r, Outcome* out) {
  r.on_update = [out](const RequestUpdate& u) {
    out->tokens.insert(out->tokens.end(), u.new_tokens.begin(), u.new_tokens.end());
    out->text += u.text_delta;
    if (u.finished) {
      out->done = true;
      out->reason = u.reason;
      out->stats = *u.stats;
    }
  };
  return r;
}

std::vector<Request> random_requests(int n, int32_t vocab, bool has_drafter, int32_t block,
                                     uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Request> v;
  for (int i = 0; i < n; ++i) {
    Request r;
    const int len = 1 + int(rng() % 60);
    for (int t = 0; t < len; ++t) r.prompt.ids.push_back(int32_t(rng() % vocab));
    r.max_tokens = 1 + int(rng() % 24);
    r.ignore_eos = rng() % 2;
    r.speculative = has_drafter && rng() % 4 != 0;
    r.block_size = rng() % 3 == 0 ? kBlockDefault : 1 + int32_t(rng() % block);
    if (rng() % 5 == 0) r.block_size = kBlockAuto;
    if (rng() % 4 == 0) {
      r.sampling.temperature = 0.8f;  // (auto lengths follow timings: fixed blocks at T > 0)
      r.sampling.top_k = rng() % 2 ? 20 : 0;
      r.sampling.seed = rng();
      if (r.block_size == kBlockAuto) r.block_size = kBlockDefault;
    }
    v.push_back(r);
  }
  return v;
}

EngineOptions options(const Family& f, int32_t max_seqs, int64_t kv_bytes) {
  EngineOptions o;
  o.model_dir = f.target;
  o.draft_dir = f.draft;
  o.threads = 2;
  o.max_context = 256;
  o.max_seqs = max_seqs;
  o.max_batch_tokens = 24;  // small budget: prompts are cut into several chunks
  o.kv_memory_bytes = kv_bytes;
  o.calibrate = false;
  return o;
}

// The --kv-memory that gives `pages` pages with `max_seqs` slots for options(f, ...): the engine
// sizes rings first (slack = max(block, chunk 24, 16)), then splits the rest into pages.
int64_t budget_for_pages(const Family& f, int64_t pages, int32_t max_seqs,
                         KvDtype dtype = KvDtype::kF32) {
  KvPoolOptions po;
  po.max_context = 256;
  po.slack = 24;
  po.dtype = dtype;
  KvPool t(kv_layout(load_model_config(f.target)), po);
  int64_t per_page = t.bytes_per_block(), rings = t.ring_bytes_per_seq();
  if (!f.draft.empty()) {
    po.max_context = 256 + 24;
    KvPool d(kv_layout(load_model_config(f.draft)), po);
    per_page += d.bytes_per_block();
    rings += d.ring_bytes_per_seq();
  }
  return pages * per_page + max_seqs * rings;
}

// budget_for_pages plus the fixed per-slot recurrent states of a hybrid target (Gated DeltaNet
// conv + ssm, double-buffered, + the replay rows of one drafter block), which the engine takes
// out of the same budget before it counts pages.
int64_t budget_for_pages_with_states(const Family& f, int64_t pages, int32_t max_seqs) {
  const ModelConfig c = load_model_config(f.target);
  if (n_recurrent_layers(c) == 0) return budget_for_pages(f, pages, max_seqs);
  const int32_t block = f.draft.empty() ? 1 : load_model_config(f.draft).dflash->block_size;
  return budget_for_pages(f, pages, max_seqs) +
         max_seqs * recurrent_bytes_per_sequence(recurrent_spec(c), block);
}

// Runs `reqs` one at a time through `e` (the solo reference).
std::vector<Outcome> run_solo(Engine& e, const std::vector<Request>& reqs) {
  std::vector<Outcome> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    e.submit(recorded(reqs[i], &out[i]));
    e.run_until_idle();
  }
  return out;
}

// Submits `reqs` with a random arrival schedule (a few at a time, random steps in between).
std::vector<Outcome> run_mixed(Engine& e, const std::vector<Request>& reqs, uint32_t seed) {
  std::vector<Outcome> out(reqs.size());
  std::mt19937 rng(seed);
  size_t next = 0;
  while (next < reqs.size() || !e.idle()) {
    const size_t burst = next < reqs.size() ? rng() % 5 : 0;
    for (size_t k = 0; k < burst && next < reqs.size(); ++k, ++next) e.submit(recorded(reqs[next], &out[next]));
    const int steps = 1 + int(rng() % 3);
    for (int s = 0; s < steps; ++s) e.step();
  }
  return out;
}

void expect_identical(const std::vector<Outcome>& solo, const std::vector<Outcome>& got,
                      const std::vector<Request>& reqs, const std::string& what) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(got[i].done) << what << " request " << i;
    EXPECT_EQ(got[i].tokens, solo[i].tokens) << what << " request " << i << " T="
                                             << reqs[i].sampling.temperature << " spec=" << reqs[i].speculative
                                             << " block=" << reqs[i].block_size;
    EXPECT_EQ(got[i].reason, solo[i].reason) << what << " request " << i;
    EXPECT_EQ(got[i].stats.drafted_tokens, solo[i].stats.drafted_tokens) << what << " request " << i;
    EXPECT_EQ(got[i].stats.accepted_tokens, solo[i].stats.accepted_tokens) << what << " request " << i;
  }
}

TEST(Batch, EveryRequestEqualsItsSoloRunInRandomSchedules) {
  int total = 0;
  for (const Family& f : families()) {
    Engine solo_engine(options(f, 1, 0));
    Engine batch_engine(options(f, 6, 0));
    const ModelInfo& info = solo_engine.info();
    const auto reqs = random_requests(32, info.vocab_size, info.has_drafter,
                                      std::max(1, info.drafter_block_size), 101 + total);
    const auto solo = run_solo(solo_engine, reqs);
    const auto mixed = run_mixed(batch_engine, reqs, 7 + total);
    expect_identical(solo, mixed, reqs, f.name);
    EXPECT_EQ(batch_engine.metrics().kv_blocks_used, 0) << f.name;
    EXPECT_EQ(solo_engine.metrics().kv_blocks_used, 0) << f.name;
    EXPECT_GT(batch_engine.metrics().steps_total, 0);
    total += int(reqs.size());
    std::printf("[batch] %-18s %zu requests identical to solo (%lld steps batched, %lld solo)\n",
                f.name.c_str(), reqs.size(), (long long)batch_engine.metrics().steps_total,
                (long long)solo_engine.metrics().steps_total);
  }
  EXPECT_GE(total, 200);
}

TEST(Batch, PreemptionUnderATinyKvBudgetChangesNothing) {
  for (const Family& f : families()) {
    if (f.name != "zlab_full" && f.name != "mixed_swa" && f.name != "mimo_flash_split") continue;
    Engine solo_engine(options(f, 1, 0));
    const ModelInfo& info = solo_engine.info();
    auto reqs = random_requests(24, info.vocab_size, info.has_drafter,
                                std::max(1, info.drafter_block_size), 55);
    for (auto& r : reqs) {
      r.max_tokens = 24 + int(r.prompt.ids.size() % 16);
      r.ignore_eos = true;
    }
    const auto solo = run_solo(solo_engine, reqs);
    // 12 pages (16 positions each) for 6 slots: sequences of up to ~100 positions cannot all
    // grow at once.
    Engine tight(options(f, 6, budget_for_pages(f, 12, 6)));
    const auto got = run_mixed(tight, reqs, 3);
    expect_identical(solo, got, reqs, f.name + " (tight KV)");
    const EngineMetrics m = tight.metrics();
    EXPECT_GT(m.preemptions_total, 0) << f.name << ": the budget was meant to force preemption";
    EXPECT_EQ(m.kv_blocks_used, 0) << f.name;
    EXPECT_EQ(m.kv_blocks_total, 12) << f.name;
    std::printf("[batch] %-18s tight KV (%lld pages): %lld preemptions, outputs identical\n",
                f.name.c_str(), (long long)m.kv_blocks_total, (long long)m.preemptions_total);
  }
}

// Micro-batch groups (SchedulerOptions::groups, what --pp-microbatches sets under a pipeline):
// here the forwards are not split (begin does nothing, end runs forward), but the scheduler keeps
// its groups, their in-flight state, the preemption and cancel rules: outputs must not change.
TEST(Batch, MicroBatchGroupsChangeNothing) {
  for (const Family& f : families()) {
    if (f.name != "zlab_full" && f.name != "default" && f.name != "qwen35_flat" && f.name != "mimo_flash_split")
      continue;
    Engine solo_engine(options(f, 1, 0));
    const ModelInfo& info = solo_engine.info();
    auto reqs = random_requests(20, info.vocab_size, info.has_drafter,
                                std::max(1, info.drafter_block_size), 77);
    for (auto& r : reqs)
      if (r.block_size == kBlockAuto) r.block_size = kBlockDefault;
    const auto solo = run_solo(solo_engine, reqs);
    for (int32_t groups : {2, 3}) {
      EngineOptions o = options(f, 6, 0);
      o.microbatches = groups;
      Engine grouped(o);
      expect_identical(solo, run_mixed(grouped, reqs, 9 + groups), reqs, f.name + " groups " + std::to_string(groups));
      EXPECT_EQ(grouped.metrics().kv_blocks_used, 0) << f.name;
      o.kv_memory_bytes = budget_for_pages_with_states(f, 12, 6);
      Engine tight(o);
      expect_identical(solo, run_mixed(tight, reqs, 5), reqs, f.name + " tight, groups " + std::to_string(groups));
      EXPECT_EQ(tight.metrics().kv_blocks_used, 0) << f.name;
      std::printf("[batch] %-18s %d groups: identical (tight KV: %lld preemptions)\n", f.name.c_str(), groups,
                  (long long)tight.metrics().preemptions_total);
    }
  }
}

// A cancel of a sequence whose group's forward is in flight lands when that forward ends.
TEST(Batch, CancelInAMicroBatchInFlight) {
  EngineOptions o = options(families()[0], 4, 0);
  o.microbatches = 2;
  Engine e(o);
  std::vector<Outcome> out(4);
  std::vector<RequestId> ids;
  for (int i = 0; i < 4; ++i) {
    Request r;
    r.prompt.ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    r.max_tokens = 200;
    r.ignore_eos = true;
    ids.push_back(e.submit(recorded(r, &out[size_t(i)])));
  }
  for (int s = 0; s < 5; ++s) e.step();
  for (RequestId id : ids) e.cancel(id);
  // One group's forward is in flight between steps: its two sequences finish when it ends.
  EXPECT_EQ(e.metrics().running, 2);
  EXPECT_FALSE(out[0].done && out[1].done && out[2].done && out[3].done);
  for (int s = 0; s < 4 && !e.idle(); ++s) e.step();
  EXPECT_TRUE(e.idle());
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
  for (const auto& o2 : out) {
    EXPECT_TRUE(o2.done);
    EXPECT_EQ(o2.reason, FinishReason::kCancelled);
  }
}

TEST(Batch, CancelFreesEverythingWithinOneStep) {
  const Family f = families()[0];
  Engine e(options(f, 4, 0));
  std::vector<Outcome> out(3);
  std::vector<RequestId> ids;
  for (int i = 0; i < 3; ++i) {
    Request r;
    r.prompt.ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    r.max_tokens = 200;
    r.ignore_eos = true;
    ids.push_back(e.submit(recorded(r, &out[i])));
  }
  for (int s = 0; s < 4; ++s) e.step();
  EXPECT_GT(e.metrics().kv_blocks_used, 0);
  for (RequestId id : ids) e.cancel(id);
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
  EXPECT_EQ(e.metrics().running, 0);
  for (const auto& o : out) {
    EXPECT_TRUE(o.done);
    EXPECT_EQ(o.reason, FinishReason::kCancelled);
  }
  e.cancel(12345);  // unknown ids are ignored
  EXPECT_TRUE(e.idle());
}

// Recurrent states come out of the --kv-memory budget: per slot, both buffers of every
// Gated DeltaNet layer's conv state [conv_dim, K−1] and delta-rule state [Hv, dk, dv] plus the
// replay rows [block, conv_dim + 2·Hv], fp32 — worked out here from config.json by hand. The
// same budget therefore buys a Qwen3.5 hybrid fewer attention pages (fewer sequences) than it
// would if the states were free, and a budget below the states is refused naming them.
TEST(Batch, RecurrentStatesCountAgainstTheKvBudget) {
  const Family f{"qwen35_flat", test::fixture("qwen35/flat_untied"), test::fixture("qwen35/flat_untied_draft")};
  const auto c = test::read_json(f.target + "/config.json");
  const int64_t hk = c["linear_num_key_heads"], hv = c["linear_num_value_heads"];
  const int64_t dk = c["linear_key_head_dim"], dv = c["linear_value_head_dim"], K = c["linear_conv_kernel_dim"];
  int64_t n_lin = 0;
  for (const auto& t : c["layer_types"]) n_lin += t == "linear_attention";
  const int64_t block = test::read_json(f.draft + "/config.json")["block_size"];
  const int64_t conv_dim = 2 * hk * dk + hv * dv;
  const int64_t per_seq = 4 * n_lin * (2 * (conv_dim * (K - 1) + hv * dk * dv) + block * (conv_dim + 2 * hv));
  const int32_t slots = 4;
  const int64_t pages = 40;
  const int64_t attn_only = budget_for_pages(f, pages, slots);  // rings + pages, no recurrent state
  const int64_t per_page = budget_for_pages(f, 1, 1) - budget_for_pages(f, 0, 1);
  {
    Engine e(options(f, slots, attn_only));
    const int64_t want = pages - (slots * per_seq + per_page - 1) / per_page;  // floor of the rest
    EXPECT_EQ(e.metrics().kv_blocks_total, want)
        << "per-sequence recurrent bytes " << per_seq << ", page " << per_page;
    EXPECT_LT(e.metrics().kv_blocks_total, pages);
    std::printf("[batch] qwen35 %d slots: %lld B recurrent state per slot; a budget of %lld pages "
                "without them leaves %lld pages\n", slots, (long long)per_seq, (long long)pages,
                (long long)e.metrics().kv_blocks_total);
  }
  {
    Engine e(options(f, slots, attn_only + slots * per_seq));  // the states paid for: all pages
    EXPECT_EQ(e.metrics().kv_blocks_total, pages);
  }
  try {
    Engine e(options(f, slots, slots * per_seq));
    ADD_FAILURE() << "a budget below the recurrent states was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(per_seq) + " of recurrent states"), std::string::npos)
        << e.what();
  }
}

TEST(Batch, RefusalsNameTheNumbersAndLeaveOthersRunning) {
  const Family f = families()[0];
  Engine e(options(f, 2, 0));
  Outcome ok;
  Request good;
  good.prompt.ids = {5, 6, 7};
  good.max_tokens = 5;
  e.submit(recorded(good, &ok));
  Request too_long;
  too_long.prompt.ids.assign(300, 3);
  try {
    e.submit(too_long);
    FAIL() << "a prompt longer than the context was accepted";
  } catch (const RequestRefused& r) {
    EXPECT_EQ(r.kind, RequestRefused::Kind::kTooLong);
    EXPECT_NE(r.message.find("300"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("256"), std::string::npos) << r.message;
  }
  Request bad_id;
  bad_id.prompt.ids = {1, 999999};
  EXPECT_THROW(e.submit(bad_id), RequestRefused);
  Request bad_block = good;
  bad_block.block_size = 1000;
  EXPECT_THROW(e.submit(bad_block), RequestRefused);
  e.run_until_idle();
  EXPECT_TRUE(ok.done);
  EXPECT_EQ(ok.tokens.size(), 5u);
  // A budget that cannot hold one prompt refuses it as such.
  Engine tiny(options(f, 1, budget_for_pages(f, 2, 1)));
  Request big;
  big.prompt.ids.assign(100, 4);
  try {
    tiny.submit(big);
    FAIL() << "a prompt larger than the KV budget was accepted";
  } catch (const RequestRefused& r) {
    EXPECT_EQ(r.kind, RequestRefused::Kind::kNoCapacity) << r.message;
  }
}

TEST(Batch, StopStringsMatchAcrossTokensAndAreNeverEmitted) {
  const Family f = families()[4];  // default: has a tokenizer
  ASSERT_EQ(f.name, "default");
  Engine e(options(f, 2, 0));
  Request r;
  r.prompt.text = "The quick brown fox";
  r.max_tokens = 40;
  r.ignore_eos = true;
  Outcome full;
  e.submit(recorded(r, &full));
  e.run_until_idle();
  ASSERT_GE(full.text.size(), 12u);
  // Stop strings cut from the middle of the text, spanning token boundaries.
  int checked = 0;
  for (size_t at : {size_t(3), full.text.size() / 2, full.text.size() - 5}) {
    std::string stop = full.text.substr(at, 4);
    if (stop.find('\xEF') != std::string::npos) continue;  // skip U+FFFD pieces
    const size_t first = full.text.find(stop);
    for (bool spec : {false, true}) {
      Request s = r;
      s.stop = {stop, "never-appears-here"};
      s.speculative = spec;
      Outcome o;
      e.submit(recorded(s, &o));
      e.run_until_idle();
      EXPECT_EQ(o.text, full.text.substr(0, first)) << "stop '" << stop << "'";
      EXPECT_EQ(o.reason, FinishReason::kStop);
      EXPECT_LE(o.tokens.size(), full.tokens.size());
      ++checked;
    }
  }
  EXPECT_GE(checked, 2);
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
}

}  // namespace
}  // namespace dfl

namespace dfl {
namespace {

// bf16 KV (--kv-dtype bf16): every request equals its solo run (also bf16) in random schedules,
// on every family (rings, recurrent hybrids, drafters' pools included), and under a 12-page
// budget that forces preemption (the budget counts bf16 pages: half the bytes of fp32 ones).
TEST(Batch, Bf16KvEveryRequestEqualsItsSoloRun) {
  int total = 0;
  for (const Family& f : families()) {
    EngineOptions so = options(f, 1, 0), bo = options(f, 6, 0);
    so.kv_dtype = bo.kv_dtype = KvDtype::kBF16;
    Engine solo_engine(so);
    Engine batch_engine(bo);
    const ModelInfo& info = solo_engine.info();
    const auto reqs = random_requests(16, info.vocab_size, info.has_drafter,
                                      std::max(1, info.drafter_block_size), 301 + total);
    const auto solo = run_solo(solo_engine, reqs);
    const auto mixed = run_mixed(batch_engine, reqs, 11 + total);
    expect_identical(solo, mixed, reqs, f.name + " (bf16 KV)");
    EXPECT_EQ(batch_engine.metrics().kv_blocks_used, 0) << f.name;
    total += int(reqs.size());
  }
  std::printf("[batch] bf16 KV: %d requests identical to their solo runs\n", total);
}

TEST(Batch, Bf16KvPreemptionUnderATinyBudgetChangesNothing) {
  for (const Family& f : families()) {
    if (f.name != "zlab_full" && f.name != "mixed_swa") continue;
    EngineOptions so = options(f, 1, 0);
    so.kv_dtype = KvDtype::kBF16;
    Engine solo_engine(so);
    const ModelInfo& info = solo_engine.info();
    auto reqs = random_requests(16, info.vocab_size, info.has_drafter,
                                std::max(1, info.drafter_block_size), 57);
    for (auto& r : reqs) {
      r.max_tokens = 24 + int(r.prompt.ids.size() % 16);
      r.ignore_eos = true;
    }
    const auto solo = run_solo(solo_engine, reqs);
    EngineOptions to = options(f, 6, budget_for_pages(f, 12, 6, KvDtype::kBF16));
    to.kv_dtype = KvDtype::kBF16;
    Engine tight(to);
    const auto got = run_mixed(tight, reqs, 5);
    expect_identical(solo, got, reqs, f.name + " (bf16 KV, tight)");
    const EngineMetrics m = tight.metrics();
    EXPECT_GT(m.preemptions_total, 0) << f.name;
    EXPECT_EQ(m.kv_blocks_total, 12) << f.name << ": the budget counts bf16 bytes";
    EXPECT_EQ(m.kv_blocks_used, 0) << f.name;
  }
}

}  // namespace
}  // namespace dfl
