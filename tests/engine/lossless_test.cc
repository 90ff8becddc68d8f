// LOSSLESS end to end at T = 0: speculative decoding with a proposer commits exactly the tokens
// of target-only greedy decoding, token for token, for every target+drafter pair, many prompts
// and every block size; plus stop tokens / max_tokens landing inside a block, the proposer
// protocol (positions and the tap rows it is fed), and the statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/golden.h"
#include "common/models.h"
#include "engine/generator.h"
#include "model/dflash_draft.h"
#include "spec/dflash_proposer.h"

namespace dfl {
namespace {

struct PairDef {
  std::string name, target, draft;
};

std::vector<PairDef> all_pairs() {
  std::vector<PairDef> v;
  // speculators_d2t: reduced-vocabulary drafter (own lm_head, d2t map back to target ids);
  // speculators_d2t_qwen35: the same dialect on the Qwen3.5 hybrid target, block 16.
  for (const char* n : {"zlab_full", "mimo_style", "mixed_swa", "dflash2_noncausal", "gemma4_mixed",
                        "speculators_d2t", "speculators_d2t_qwen35"}) {
    const auto meta = test::read_json(test::fixture(std::string("dflash/") + n + "/meta.json"));
    v.push_back({n, test::repo_root() + "/" + meta.at("target").get<std::string>(),
                 test::fixture(std::string("dflash/") + n + "/draft")});
  }
  v.push_back({"default", test::fixture("default/target"), test::fixture("default/draft")});
  // Qwen3.5 hybrid target (Gated DeltaNet + gated attention): rollback of recurrent states.
  v.push_back({"qwen35_flat", test::fixture("qwen35/flat_untied"),
               test::fixture("qwen35/flat_untied_draft")});
  // DFlash2 drafters (convolutions + candidate selector), both config dialects; the Qwen3.5 one
  // and the speculators one have block 16 (block sizes 1..16).
  for (const char* n : {"zlab_swa", "speculators_full", "qwen35_flat"}) {
    const auto meta = test::read_json(test::fixture(std::string("dflash2/") + n + "/meta.json"));
    v.push_back({std::string("dflash2_") + n, test::repo_root() + "/" + meta.at("target").get<std::string>(),
                 test::fixture(std::string("dflash2/") + n + "/draft")});
  }
  return v;
}

// Wraps a proposer and checks the protocol the generator follows: context rows arrive for
// contiguous positions, each row equal (bitwise) to the taps a plain target forward over the
// committed sequence produces; proposals start at the newest committed position.
class CheckingProposer final : public Proposer {
 public:
  CheckingProposer(Proposer& inner, std::vector<float> ref_taps, int32_t row)
      : inner_(inner), ref_(std::move(ref_taps)), row_(row) {}
  const std::vector<int32_t>& target_aux() const override { return inner_.target_aux(); }
  int32_t max_draft() const override { return inner_.max_draft(); }
  void reset(int32_t seq) override {
    held_ = 0;
    inner_.reset(seq);
  }
  void add_context(int32_t seq, const float* taps, int32_t n, int32_t pos0) override {
    if (pos0 != held_) ++errors;
    for (int32_t i = 0; i < n; ++i) {
      const size_t p = size_t(pos0 + i);
      if ((p + 1) * row_ > ref_.size() ||
          std::memcmp(taps + size_t(i) * row_, ref_.data() + p * row_, sizeof(float) * row_) != 0)
        ++tap_errors;
    }
    held_ = pos0 + n;
    inner_.add_context(seq, taps, n, pos0);
  }
  void propose(int32_t seq, int32_t anchor, int32_t anchor_pos, int32_t n_draft,
               const SamplingParams& params, Rng& rng, Draft& out) override {
    if (anchor_pos != held_) ++errors;
    if (n_draft < 1 || n_draft > max_draft()) ++errors;
    inner_.propose(seq, anchor, anchor_pos, n_draft, params, rng, out);
    if (int32_t(out.tokens.size()) != n_draft) ++errors;
  }
  int errors = 0, tap_errors = 0;

 private:
  Proposer& inner_;
  std::vector<float> ref_;
  int32_t row_;
  int32_t held_ = 0;
};

// Proposes the known target continuation with one injected mistake at a random place (or none),
// so every acceptance length 0..n_draft occurs.
class ScriptedProposer final : public Proposer {
 public:
  ScriptedProposer(std::vector<int32_t> truth, int32_t n_prompt, int32_t max_draft, int32_t vocab,
                   std::vector<int32_t> aux, uint32_t seed, double p_perfect)
      : truth_(std::move(truth)), n_(n_prompt), max_draft_(max_draft), vocab_(vocab),
        aux_(std::move(aux)), rng_(seed), p_perfect_(p_perfect) {}
  const std::vector<int32_t>& target_aux() const override { return aux_; }
  int32_t max_draft() const override { return max_draft_; }
  void reset(int32_t) override {}
  void add_context(int32_t, const float*, int32_t, int32_t) override {}
  void propose(int32_t, int32_t anchor, int32_t anchor_pos, int32_t n_draft, const SamplingParams&,
               Rng&, Draft& out) override {
    out.tokens.clear();
    std::uniform_real_distribution<double> u(0, 1);
    const int32_t bad = u(rng_) < p_perfect_ ? n_draft : int32_t(rng_() % (n_draft + 1));
    for (int32_t j = 0; j < n_draft; ++j) {
      const size_t idx = size_t(anchor_pos + 1 + j - n_);
      int32_t t = idx < truth_.size() ? truth_[idx] : 0;
      if (j >= bad) t = (t + 1 + int32_t(rng_() % (vocab_ - 1))) % vocab_;
      out.tokens.push_back(t);
    }
  }

 private:
  std::vector<int32_t> truth_;
  int32_t n_, max_draft_, vocab_;
  std::vector<int32_t> aux_;
  std::mt19937 rng_;
  double p_perfect_;
};

// Taps of the committed sequence prompt + output[:-1] as target-only generation computes them
// (the prompt in one forward, then one token per forward), [len, row]. One forward over the
// whole sequence would be the same in fp32, but a long run may take the bf16 prefill attention
// (ops.h), which target-only decoding never uses past the prompt.
std::vector<float> reference_taps(CausalLM& target, const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& out, const std::vector<int32_t>& aux) {
  target.kv().clear(0);
  std::vector<float> taps = test::run_forward(target, prompt, LogitsMode::kNone, &aux).aux;
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    const std::vector<float> t = test::run_forward(target, {out[i]}, LogitsMode::kNone, &aux).aux;
    taps.insert(taps.end(), t.begin(), t.end());
  }
  target.kv().clear(0);
  return taps;
}

// Statistics invariants of one speculative run (no stop ids / callback: ends by max_tokens).
void check_stats(const GenerateResult& r, int32_t block, bool ended_by_budget, const std::string& what) {
  const GenerateStats& s = r.stats;
  EXPECT_EQ(s.generated_tokens, int32_t(r.tokens.size())) << what;
  // The histogram is sized by the first speculative cycle (empty if generation ended at the
  // prefill token).
  if (s.target_passes == 0 && s.acceptance_histogram.empty()) {
    EXPECT_EQ(s.generated_tokens, 1) << what;
    return;
  }
  ASSERT_EQ(int32_t(s.acceptance_histogram.size()), block) << what;
  int64_t cycles = 0, acc = 0;
  for (size_t k = 0; k < s.acceptance_histogram.size(); ++k) {
    cycles += s.acceptance_histogram[k];
    acc += int64_t(k) * s.acceptance_histogram[k];
  }
  EXPECT_EQ(cycles, s.draft_steps) << what;
  EXPECT_EQ(acc, s.accepted_tokens) << what;
  EXPECT_EQ(s.committed_in_cycles, s.accepted_tokens + s.draft_steps) << what;
  EXPECT_LE(s.accepted_tokens, s.drafted_tokens) << what;
  EXPECT_LE(s.drafted_tokens, s.draft_steps * (block - 1)) << what;
  EXPECT_GE(s.target_passes, s.draft_steps) << what;
  if (s.draft_steps) {
    EXPECT_GE(s.mean_acceptance_length(), 1.0) << what;
    EXPECT_LE(s.mean_acceptance_length(), double(block)) << what;
    EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), double(s.committed_in_cycles) / s.draft_steps);
  }
  if (ended_by_budget) {
    // 1 token from the prefill, a+1 per verify pass (passes without drafts commit 1).
    EXPECT_EQ(s.generated_tokens, 1 + s.committed_in_cycles + (s.target_passes - s.draft_steps)) << what;
  }
  if (!r.cycles.empty()) {
    EXPECT_EQ(int64_t(r.cycles.size()), s.draft_steps) << what;
    int64_t d = 0, a = 0;
    for (const auto& c : r.cycles) {
      d += c.drafted.size();
      a += c.accepted;
      EXPECT_LE(c.accepted, int32_t(c.drafted.size())) << what;
    }
    EXPECT_EQ(d, s.drafted_tokens) << what;
    EXPECT_EQ(a, s.accepted_tokens) << what;
  }
}

std::vector<std::vector<int32_t>> make_prompts(const std::vector<int32_t>& golden, uint32_t seed) {
  std::vector<std::vector<int32_t>> ps = {golden};
  std::mt19937 rng(seed);
  const int lens[] = {1, 2, 3, 5, 8, 13, 17, 24, 31, 40};
  for (int len : lens) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(int32_t(rng() % 506));
    ps.push_back(p);
  }
  return ps;
}

TEST(Lossless, GreedyDFlashEqualsTargetOnly) {
  int64_t runs = 0, tokens = 0, drafted = 0, accepted = 0, steps = 0;
  for (const PairDef& pd : all_pairs()) {
    auto pool = test::make_pool(1);
    auto target = load_causal_lm(pd.target, LoadOptions{}, *pool);
    auto drafter = std::make_unique<DFlashDraftModel>(pd.draft, *target, LoadOptions{}, *pool);
    const int32_t B = drafter->dflash().block_size;
    DFlashProposer dflash(std::move(drafter), *target);
    Generator plain(*target, nullptr);
    test::Golden tg(test::fixture("qwen3/tied_gqa2/golden.safetensors"));
    const auto prompts = make_prompts(tg.i32("prompt_ids"), 17 + runs);
    int64_t pair_drafted = 0, pair_accepted = 0, pair_steps = 0, pair_committed = 0;
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      GenerateRequest req;
      req.prompt = prompts[pi];
      req.max_tokens = 40;
      const GenerateResult want = plain.generate(req);
      ASSERT_EQ(want.tokens.size(), 40u);
      EXPECT_EQ(want.stop_reason, "max_tokens");
      const std::vector<float> ref = reference_taps(*target, req.prompt, want.tokens, dflash.target_aux());
      const int32_t row = int32_t(dflash.target_aux().size()) * target->config().hidden_size;
      CheckingProposer checked(dflash, ref, row);
      Generator spec(*target, &checked);
      // Block sizes 2..B; on the golden prompt also 1 (no drafts), 0 (the drafter's own B)
      // and an oversized request (capped to B).
      std::vector<int32_t> sizes;
      for (int32_t b = 2; b <= B; ++b) sizes.push_back(b);
      if (pi == 0) sizes.insert(sizes.end(), {1, 0, 100});
      for (const int32_t b : sizes) {
        const int32_t eff = b == 0 ? B : std::min(b, B);
        req.block_size = b;
        req.trace = true;
        const GenerateResult got = spec.generate(req);
        const std::string what = pd.name + " prompt " + std::to_string(pi) + " block " + std::to_string(b);
        ASSERT_EQ(got.tokens, want.tokens) << what;
        EXPECT_EQ(got.stop_reason, "max_tokens") << what;
        check_stats(got, eff, true, what);
        if (b == 1) EXPECT_EQ(got.stats.draft_steps, 0) << what;
        EXPECT_EQ(checked.errors, 0) << what;
        EXPECT_EQ(checked.tap_errors, 0) << what;
        ++runs;
        tokens += got.tokens.size();
        pair_drafted += got.stats.drafted_tokens;
        pair_accepted += got.stats.accepted_tokens;
        pair_steps += got.stats.draft_steps;
        pair_committed += got.stats.committed_in_cycles;
      }
    }
    std::printf("[lossless] %-18s B≤%d: drafted %lld accepted %lld (%.1f%%), tau %.3f\n", pd.name.c_str(),
                B, (long long)pair_drafted, (long long)pair_accepted, 100.0 * pair_accepted / std::max<int64_t>(1, pair_drafted),
                double(pair_committed) / std::max<int64_t>(1, pair_steps));
    drafted += pair_drafted;
    accepted += pair_accepted;
    steps += pair_steps;
  }
  std::printf("[lossless] DFlash: %lld runs, %lld tokens, all identical to target-only\n",
              (long long)runs, (long long)tokens);
}

// The random-weight drafters rarely hit; a scripted proposer that knows the answer (with
// mistakes injected at random places) drives every acceptance length through the generator.
TEST(Lossless, ScriptedProposerAllAcceptanceLengths) {
  for (const char* tname : {"qwen3/sharded", "default/target", "qwen35/flat_untied",
                            "qwen35/nested_tied", "gemma4/dense_v5", "gemma4/moe_hub"}) {
    auto pool = test::make_pool(1);
    auto target = load_causal_lm(test::fixture(tname), LoadOptions{}, *pool);
    const int32_t V = target->config().vocab_size;
    Generator plain(*target, nullptr);
    test::Golden tg(test::fixture("qwen3/tied_gqa2/golden.safetensors"));
    const auto prompts = make_prompts(tg.i32("prompt_ids"), 5);
    std::vector<int64_t> hist(16, 0);
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      GenerateRequest req;
      req.prompt = prompts[pi];
      req.max_tokens = 40;
      const GenerateResult want = plain.generate(req);
      const std::vector<int32_t> aux = {1, 0, target->config().n_layers};
      const auto ref = reference_taps(*target, req.prompt, want.tokens, aux);
      for (int32_t b = 2; b <= 16; ++b) {
        ScriptedProposer script(want.tokens, int32_t(req.prompt.size()), 15, V, aux, 1000 * pi + b, 0.3);
        CheckingProposer checked(script, ref, 3 * target->config().hidden_size);
        Generator spec(*target, &checked);
        req.block_size = b;
        req.trace = true;
        const GenerateResult got = spec.generate(req);
        const std::string what = std::string(tname) + " prompt " + std::to_string(pi) + " block " + std::to_string(b);
        ASSERT_EQ(got.tokens, want.tokens) << what;
        check_stats(got, b, true, what);
        EXPECT_EQ(checked.errors, 0) << what;
        EXPECT_EQ(checked.tap_errors, 0) << what;
        for (size_t k = 0; k < got.stats.acceptance_histogram.size(); ++k) hist[k] += got.stats.acceptance_histogram[k];
      }
    }
    for (int k = 0; k < 16; ++k) EXPECT_GT(hist[k], 0) << tname << ": acceptance length " << k << " never exercised";
  }
}

// Qwen3.5 hybrids, every block size 1..16 (1 = the anchor alone), the scripted proposer: the
// recurrent states rolled back through CausalLM::rollback keep the output target-only's.
TEST(Lossless, Qwen35EveryBlockSize) {
  for (const char* tname : {"qwen35/flat_untied", "qwen35/nested_tied"}) {
    auto pool = test::make_pool(1);
    auto target = load_causal_lm(test::fixture(tname), LoadOptions{}, *pool);
    const int32_t V = target->config().vocab_size;
    Generator plain(*target, nullptr);
    test::Golden tg(test::fixture(std::string(tname) + "/golden.safetensors"));
    const auto prompts = make_prompts(tg.i32("prompt_ids"), 3);
    const std::vector<int32_t> aux = {0, 2, target->config().n_layers};
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      GenerateRequest req;
      req.prompt = prompts[pi];
      req.max_tokens = 48;
      const GenerateResult want = plain.generate(req);
      for (int32_t b = 1; b <= 16; ++b) {
        ScriptedProposer script(want.tokens, int32_t(req.prompt.size()), 15, V, aux, 77 * pi + b, 0.2);
        Generator spec(*target, &script);
        req.block_size = b;
        const GenerateResult got = spec.generate(req);
        ASSERT_EQ(got.tokens, want.tokens) << tname << " prompt " << pi << " block " << b;
      }
    }
  }
}

// Stop tokens and max_tokens landing inside an accepted block end generation exactly where
// target-only decoding ends.
TEST(Lossless, StopAndBudgetInsideABlock) {
  auto pool = test::make_pool(1);
  auto target = load_causal_lm(test::fixture("qwen3/sharded"), LoadOptions{}, *pool);
  const int32_t V = target->config().vocab_size;
  test::Golden tg(test::fixture("qwen3/sharded/golden.safetensors"));
  GenerateRequest req;
  req.prompt = tg.i32("prompt_ids");
  req.max_tokens = 40;
  Generator plain(*target, nullptr);
  const GenerateResult full = plain.generate(req);
  const std::vector<int32_t> aux = {1};
  // Perfect proposer: every draft accepted, so stops fall inside blocks.
  for (int32_t b : {4, 8, 16}) {
    for (int k = 1; k < 30; k += 3) {
      const int32_t stop = full.tokens[k];
      GenerateRequest r = req;
      r.stop_ids = {stop, 100000};
      r.block_size = b;
      const GenerateResult want = plain.generate(r);
      // Target-only output stops at the first occurrence of `stop`.
      const size_t first = std::find(full.tokens.begin(), full.tokens.end(), stop) - full.tokens.begin();
      ASSERT_EQ(want.tokens.size(), first + 1);
      EXPECT_EQ(want.stop_reason, "stop_token");
      ScriptedProposer script(full.tokens, int32_t(req.prompt.size()), 15, V, aux, 7, 1.0);
      Generator spec(*target, &script);
      const GenerateResult got = spec.generate(r);
      EXPECT_EQ(got.tokens, want.tokens) << "block " << b << " stop at " << k;
      EXPECT_EQ(got.stop_reason, "stop_token");
      EXPECT_EQ(got.stats.generated_tokens, int32_t(got.tokens.size()));
    }
    for (int32_t mt : {1, 2, 3, 5, 9, 13, 22}) {
      GenerateRequest r = req;
      r.max_tokens = mt;
      r.block_size = b;
      ScriptedProposer script(full.tokens, int32_t(req.prompt.size()), 15, V, aux, 9, 1.0);
      Generator spec(*target, &script);
      const GenerateResult got = spec.generate(r);
      EXPECT_EQ(got.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + mt)) << "max " << mt;
      EXPECT_EQ(got.stop_reason, "max_tokens");
      check_stats(got, b, true, "max_tokens " + std::to_string(mt));
      // A perfect proposer accepts everything it drafts.
      EXPECT_EQ(got.stats.accepted_tokens, got.stats.drafted_tokens);
    }
    // Callback stop inside a block.
    {
      ScriptedProposer script(full.tokens, int32_t(req.prompt.size()), 15, V, aux, 3, 1.0);
      Generator spec(*target, &script);
      GenerateRequest r = req;
      r.block_size = b;
      int seen = 0;
      const GenerateResult got = spec.generate(r, [&](int32_t) { return ++seen < 6; });
      EXPECT_EQ(got.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + 6));
      EXPECT_EQ(got.stop_reason, "callback");
    }
  }
  // With the real drafter: stop ids from the target-only output.
  auto drafter = std::make_unique<DFlashDraftModel>(test::fixture("dflash/zlab_full/draft"), *target,
                                                    LoadOptions{}, *pool);
  DFlashProposer dflash(std::move(drafter), *target);
  Generator spec(*target, &dflash);
  for (int k : {0, 2, 7, 19}) {
    GenerateRequest r = req;
    r.stop_ids = {full.tokens[k]};
    EXPECT_EQ(spec.generate(r).tokens, plain.generate(r).tokens) << k;
  }
}

// Generation that runs into the context limit stops at the same token either way.
TEST(Lossless, ContextLimit) {
  auto pool = test::make_pool(1);
  LoadOptions opts;
  opts.max_context = 48;
  auto target = load_causal_lm(test::fixture("qwen3/sharded"), opts, *pool);
  auto drafter = std::make_unique<DFlashDraftModel>(test::fixture("dflash/zlab_full/draft"), *target, opts, *pool);
  DFlashProposer dflash(std::move(drafter), *target);
  Generator plain(*target, nullptr), spec(*target, &dflash);
  test::Golden tg(test::fixture("qwen3/sharded/golden.safetensors"));
  GenerateRequest req;
  req.prompt = tg.i32("prompt_ids");  // 22 tokens
  req.max_tokens = 100;
  const GenerateResult want = plain.generate(req);
  EXPECT_EQ(want.tokens.size(), size_t(48 - 22));
  for (int32_t b : {2, 5, 8}) {
    req.block_size = b;
    const GenerateResult got = spec.generate(req);
    EXPECT_EQ(got.tokens, want.tokens) << b;
  }
  req.prompt.assign(48, 5);
  EXPECT_THROW(spec.generate(req), Error);
  req.prompt.clear();
  EXPECT_THROW(spec.generate(req), Error);
}

// Batch invariance across thread counts: speculative decoding on a 2-thread pool commits the
// tokens of target-only decoding on a 1-thread pool (rows are split differently per thread).
TEST(Lossless, ThreadCountDoesNotMatter) {
  auto pool1 = test::make_pool(1), pool2 = test::make_pool(2);
  for (const char* dname : {"mixed_swa"}) {
    const auto meta = test::read_json(test::fixture(std::string("dflash/") + dname + "/meta.json"));
    const std::string tdir = test::repo_root() + "/" + meta.at("target").get<std::string>();
    auto t1 = load_causal_lm(tdir, LoadOptions{}, *pool1);
    auto t2 = load_causal_lm(tdir, LoadOptions{}, *pool2);
    auto drafter = std::make_unique<DFlashDraftModel>(test::fixture(std::string("dflash/") + dname + "/draft"),
                                                      *t2, LoadOptions{}, *pool2);
    DFlashProposer dflash(std::move(drafter), *t2);
    Generator plain(*t1, nullptr), spec(*t2, &dflash);
    test::Golden tg(test::fixture("qwen3/tied_gqa2/golden.safetensors"));
    const auto prompts = make_prompts(tg.i32("prompt_ids"), 99);
    for (size_t pi : {size_t(0), prompts.size() - 1}) {
      GenerateRequest req;
      req.prompt = prompts[pi];
      req.max_tokens = 16;
      const auto want = plain.generate(req).tokens;
      for (int32_t b : {8}) {
        req.block_size = b;
        EXPECT_EQ(spec.generate(req).tokens, want) << dname << " prompt " << pi << " block " << b;
      }
    }
  }
}

// The golden greedy continuation of the target fixture is what the engine produces, with and
// without the drafter (an end-to-end anchor to the HF reference, not just self-consistency).
TEST(Lossless, MatchesHFGreedyGolden) {
  for (const char* dname : {"zlab_full", "mixed_swa", "dflash2_noncausal", "gemma4_mixed"}) {
    const auto meta = test::read_json(test::fixture(std::string("dflash/") + dname + "/meta.json"));
    const std::string tdir = test::repo_root() + "/" + meta.at("target").get<std::string>();
    test::Golden tg(tdir + "/golden.safetensors");
    auto pool = test::make_pool(1);
    auto target = load_causal_lm(tdir, LoadOptions{}, *pool);
    auto drafter = std::make_unique<DFlashDraftModel>(test::fixture(std::string("dflash/") + dname + "/draft"),
                                                      *target, LoadOptions{}, *pool);
    DFlashProposer dflash(std::move(drafter), *target);
    Generator spec(*target, &dflash);
    GenerateRequest req;
    req.prompt = tg.i32("prompt_ids");
    req.max_tokens = 32;
    EXPECT_EQ(spec.generate(req).tokens, tg.i32("greedy_ids")) << dname;
  }
}

}  // namespace
}  // namespace dfl

namespace dfl {
namespace {

// ---- bf16 KV cache (--kv-dtype bf16) --------------------------------------------------------
// The same lossless property with bf16, head-major KV pools in the target and the drafter:
// target-only and speculative decoding both store bf16 K/V, and verify rows compute exactly as
// decode rows, so the outputs stay identical token for token. (First: the bf16 pool is really
// in use — logits differ from the fp32-KV run, by a little.)
LoadOptions bf16_kv_load() {
  LoadOptions lo;
  lo.kv_dtype = KvDtype::kBF16;
  return lo;
}

TEST(Lossless, Bf16KvChangesLogitsALittle) {
  auto pool = test::make_pool(1);
  auto t32 = load_causal_lm(test::fixture("qwen3/tied_gqa2"), LoadOptions{}, *pool);
  auto t16 = load_causal_lm(test::fixture("qwen3/tied_gqa2"), bf16_kv_load(), *pool);
  ASSERT_EQ(t16->kv().dtype(), KvDtype::kBF16);
  ASSERT_EQ(t32->kv().dtype(), KvDtype::kF32);
  test::Golden tg(test::fixture("qwen3/tied_gqa2/golden.safetensors"));
  const auto a = test::run_forward(*t32, tg.i32("prompt_ids"), LogitsMode::kAll).logits;
  const auto b = test::run_forward(*t16, tg.i32("prompt_ids"), LogitsMode::kAll).logits;
  ASSERT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(a[i])));
  }
  std::printf("[lossless] bf16 KV vs fp32 KV logits: max |diff| %.3g (max |logit| %.3g)\n", diff, scale);
  EXPECT_GT(diff, 0.0) << "the bf16 pool did not change anything: is it in use?";
  EXPECT_LT(diff, 2e-2 * scale);
}

TEST(Lossless, Bf16KvGreedyDFlashEqualsTargetOnly) {
  int64_t runs = 0;
  for (const PairDef& pd : all_pairs()) {
    auto pool = test::make_pool(1);
    auto target = load_causal_lm(pd.target, bf16_kv_load(), *pool);
    auto drafter = std::make_unique<DFlashDraftModel>(pd.draft, *target, bf16_kv_load(), *pool);
    ASSERT_EQ(drafter->kv().dtype(), KvDtype::kBF16);
    const int32_t B = drafter->dflash().block_size;
    DFlashProposer dflash(std::move(drafter), *target);
    Generator plain(*target, nullptr);
    test::Golden tg(test::fixture("qwen3/tied_gqa2/golden.safetensors"));
    const auto prompts = make_prompts(tg.i32("prompt_ids"), 23);
    for (size_t pi = 0; pi < prompts.size(); pi += 3) {
      GenerateRequest req;
      req.prompt = prompts[pi];
      req.max_tokens = 40;
      const GenerateResult want = plain.generate(req);
      const std::vector<float> ref = reference_taps(*target, req.prompt, want.tokens, dflash.target_aux());
      CheckingProposer checked(dflash, ref, int32_t(dflash.target_aux().size()) * target->config().hidden_size);
      Generator spec(*target, &checked);
      for (int32_t b = 2; b <= B; ++b) {
        req.block_size = b;
        const GenerateResult got = spec.generate(req);
        const std::string what = pd.name + " prompt " + std::to_string(pi) + " block " + std::to_string(b);
        ASSERT_EQ(got.tokens, want.tokens) << what << " (bf16 KV)";
        EXPECT_EQ(checked.errors, 0) << what;
        EXPECT_EQ(checked.tap_errors, 0) << what;
        ++runs;
      }
    }
  }
  std::printf("[lossless] bf16 KV: %lld DFlash runs identical to target-only\n", (long long)runs);
}

// Every acceptance length with bf16 KV (scripted proposer, as above), on plain, hybrid and
// sliding-window targets (bf16 rings included).
TEST(Lossless, Bf16KvScriptedProposerAllAcceptanceLengths) {
  for (const char* tname : {"qwen3/sharded", "qwen35/flat_untied", "gemma4/dense_v5"}) {
    auto pool = test::make_pool(1);
    auto target = load_causal_lm(test::fixture(tname), bf16_kv_load(), *pool);
    const int32_t V = target->config().vocab_size;
    Generator plain(*target, nullptr);
    test::Golden tg(test::fixture("qwen3/tied_gqa2/golden.safetensors"));
    const auto prompts = make_prompts(tg.i32("prompt_ids"), 9);
    std::vector<int64_t> hist(16, 0);
    for (size_t pi = 0; pi < prompts.size(); pi += 2) {
      GenerateRequest req;
      req.prompt = prompts[pi];
      req.max_tokens = 40;
      const GenerateResult want = plain.generate(req);
      const std::vector<int32_t> aux = {1, 0, target->config().n_layers};
      for (int32_t b = 2; b <= 16; ++b) {
        ScriptedProposer script(want.tokens, int32_t(req.prompt.size()), 15, V, aux, 31 * pi + b, 0.3);
        Generator spec(*target, &script);
        req.block_size = b;
        const GenerateResult got = spec.generate(req);
        ASSERT_EQ(got.tokens, want.tokens) << tname << " prompt " << pi << " block " << b << " (bf16 KV)";
        for (size_t k = 0; k < got.stats.acceptance_histogram.size(); ++k) hist[k] += got.stats.acceptance_histogram[k];
      }
    }
    for (int k = 0; k < 16; ++k) EXPECT_GT(hist[k], 0) << tname << ": acceptance length " << k << " never exercised";
  }
}

}  // namespace
}  // namespace dfl
