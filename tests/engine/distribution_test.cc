// T > 0: speculative decoding must sample from the target's distribution. Many short seeded
// generations (3 tokens) with and without a proposer are compared with the EXACT distribution of
// the first three tokens, computed from target forwards (chi-square goodness of fit, p = 1e-4).
//
// Two proposers: the real DFlash drafter (random weights: its drafts almost never fall in the
// target's top-k, so it exercises the all-rejected path), and a "self-draft" proposer that drafts
// with a sharpened copy (lower temperature) of the target's own distribution (q ≠ p but overlapping, so accept,
// reject-with-residual and bonus paths all occur). The same statistic is shown to reject
// deliberately broken verifiers (accept every draft; resample from p instead of the residual
// max(p − q, 0)) — that is the test's power, printed with the statistics.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <functional>
#include <map>

#include "common/golden.h"
#include "common/models.h"
#include "common/stats.h"
#include "core/mmap.h"
#include "engine/generator.h"
#include "model/dflash_draft.h"
#include "sampling/verify.h"
#include "spec/dflash_proposer.h"

namespace dfl {
namespace {

using Triple = std::array<int32_t, 3>;

// Drafts autoregressively with its own copy of the target, q = processed(logits) at a lower
// temperature (same top-k support). It rebuilds the committed sequence from the protocol:
// add_context(n rows at pos0) = the anchor and n − 1 accepted drafts of the last proposal.
class SelfDraftProposer final : public Proposer {
 public:
  SelfDraftProposer(std::unique_ptr<CausalLM> model, std::vector<int32_t> prompt, float q_temperature)
      : m_(std::move(model)), prompt_(std::move(prompt)), q_temp_(q_temperature) {}
  const std::vector<int32_t>& target_aux() const override { return aux_; }
  int32_t max_draft() const override { return 7; }
  void reset(int32_t) override { hist_.clear(); }
  void add_context(int32_t, const float*, int32_t n, int32_t pos0) override {
    if (pos0 == 0) {
      EXPECT_EQ(n, int32_t(prompt_.size()));
      hist_ = prompt_;
      return;
    }
    ASSERT_EQ(int32_t(hist_.size()), pos0);
    hist_.push_back(anchor_);
    for (int32_t j = 0; j + 1 < n; ++j) hist_.push_back(drafts_[j]);
  }
  void propose(int32_t, int32_t anchor, int32_t anchor_pos, int32_t n_draft, const SamplingParams& params,
               Rng& rng, Draft& out) override {
    EXPECT_EQ(int32_t(hist_.size()), anchor_pos);
    anchor_ = anchor;
    SamplingParams q = params;
    q.temperature = q_temp_;
    const int64_t V = m_->config().vocab_size;
    std::vector<int32_t> seq = hist_;
    seq.push_back(anchor);
    m_->kv().clear(0);
    ForwardOut o = test::run_forward(*m_, seq, LogitsMode::kLast);
    out.tokens.clear();
    out.probs.clear();
    std::vector<float> probs;
    for (int32_t j = 0; j < n_draft; ++j) {
      sampling_probs(o.logits.data(), V, q, probs);
      const int32_t t = sample_from(probs.data(), V, rng);
      out.tokens.push_back(t);
      out.probs.insert(out.probs.end(), probs.begin(), probs.end());
      if (j + 1 < n_draft) o = test::run_forward(*m_, {t}, LogitsMode::kLast);
    }
    drafts_ = out.tokens;
  }

 private:
  std::unique_ptr<CausalLM> m_;
  std::vector<int32_t> prompt_, hist_, drafts_, aux_ = {1};
  int32_t anchor_ = 0;
  float q_temp_;
};

struct SpecSetup {
  std::unique_ptr<ThreadPool> pool = test::make_pool(1);
  std::unique_ptr<CausalLM> target;
  std::unique_ptr<DFlashProposer> dflash;
  std::unique_ptr<SelfDraftProposer> self;
  std::vector<int32_t> prompt;
  SamplingParams sp;
  int32_t V = 0;
  SpecSetup(const std::string& dname, float q_temperature)
      : SpecSetup(test::repo_root() + "/" +
                      test::read_json(test::fixture("dflash/" + dname + "/meta.json"))
                          .at("target")
                          .get<std::string>(),
                  test::fixture("dflash/" + dname + "/draft"), q_temperature) {}
  SpecSetup(const std::string& tdir, const std::string& ddir, float q_temperature)
      : SpecSetup(tdir, ddir, golden_prompt(tdir), q_temperature) {}
  // prompt_ids: the prompt (no self-draft proposer when q_temperature ≤ 0).
  SpecSetup(const std::string& tdir, const std::string& ddir, std::vector<int32_t> prompt_ids,
            float q_temperature, int threads = 1)
      : pool(test::make_pool(threads)), prompt(std::move(prompt_ids)) {
    target = load_causal_lm(tdir, LoadOptions{}, *pool);
    V = target->config().vocab_size;
    auto d = std::make_unique<DFlashDraftModel>(ddir, *target, LoadOptions{}, *pool);
    dflash = std::make_unique<DFlashProposer>(std::move(d), *target);
    if (q_temperature > 0)
      self = std::make_unique<SelfDraftProposer>(load_causal_lm(tdir, LoadOptions{}, *pool), prompt,
                                                 q_temperature);
  }
  static std::vector<int32_t> golden_prompt(const std::string& tdir) {
    test::Golden g(tdir + "/golden.safetensors");
    const auto p = g.i32("prompt_ids");
    return {p.begin(), p.begin() + 6};  // short prompt: cheap prefill
  }

  // Exact P(t1, t2, t3) under the processed target distribution. Each branch is recomputed from
  // the prompt (a recurrent target cannot be rolled back past its last forward).
  std::map<Triple, double> exact() {
    std::map<Triple, double> out;
    auto from_prompt = [&](const std::vector<int32_t>& extra) {
      target->release(0);
      ForwardOut o = test::run_forward(*target, prompt, LogitsMode::kLast);
      for (int32_t t : extra) o = test::run_forward(*target, {t}, LogitsMode::kLast);
      return o;
    };
    ForwardOut o = from_prompt({});
    std::vector<float> p1, p2, p3;
    sampling_probs(o.logits.data(), V, sp, p1);
    for (int32_t a = 0; a < V; ++a) {
      if (p1[a] <= 0) continue;
      ForwardOut oa = from_prompt({a});
      sampling_probs(oa.logits.data(), V, sp, p2);
      for (int32_t b = 0; b < V; ++b) {
        if (p2[b] <= 0) continue;
        ForwardOut ob = from_prompt({a, b});
        sampling_probs(ob.logits.data(), V, sp, p3);
        for (int32_t c = 0; c < V; ++c)
          if (p3[c] > 0) out[{a, b, c}] = double(p1[a]) * p2[b] * p3[c];
      }
    }
    target->release(0);
    return out;
  }

  // T = 1, top-k 4: N seeded DFlash generations follow the exact distribution (chi-square does
  // not reject) and some drafts were made; prints the statistic under `label`.
  void expect_dflash_follows_target(const char* label, int N, uint64_t seed0) {
    sp.temperature = 1.0f;
    sp.top_k = 4;
    const auto ex = exact();
    int64_t acc = 0, dr = 0;
    const auto spec = run_generator(dflash.get(), N, seed0, &acc, &dr);
    const auto c = test::chi2_gof(spec, ex, N);
    std::printf("[T>0 %s] DFlash (draft vocab %lld of %d) chi2 %.1f TV %.3f (accepted %lld/%lld), "
                "reject > %.1f\n", label, (long long)dflash->drafter().out_vocab(), V, c.stat,
                test::total_variation(spec, ex, N), (long long)acc, (long long)dr, c.threshold);
    EXPECT_FALSE(c.reject()) << label;
    EXPECT_GT(dr, 0) << label;
  }

  std::map<Triple, int64_t> run_generator(Proposer* proposer, int N, uint64_t seed0,
                                          int64_t* accepted = nullptr, int64_t* drafted = nullptr) {
    Generator gen(*target, proposer);
    std::map<Triple, int64_t> counts;
    GenerateRequest req;
    req.prompt = prompt;
    req.max_tokens = 3;
    req.sampling = sp;
    for (int i = 0; i < N; ++i) {
      req.sampling.seed = seed0 + i;
      const GenerateResult r = gen.generate(req);
      EXPECT_EQ(r.tokens.size(), 3u);
      if (r.tokens.size() == 3) ++counts[{r.tokens[0], r.tokens[1], r.tokens[2]}];
      if (accepted) *accepted += r.stats.accepted_tokens;
      if (drafted) *drafted += r.stats.drafted_tokens;
    }
    return counts;
  }

  // One speculative cycle by hand (prefill → anchor → 2 drafts → one verify pass), with a
  // pluggable verifier; the third token comes from a plain target step when needed.
  using Verifier = std::function<VerifyResult(const int32_t*, int32_t, const float*, const float*, Rng&)>;
  std::map<Triple, int64_t> run_manual(Proposer& prop, const Verifier& verify, int N, uint64_t seed0) {
    std::map<Triple, int64_t> counts;
    std::vector<float> scratch;
    const int32_t n = int32_t(prompt.size());
    for (int i = 0; i < N; ++i) {
      Rng rng(seed0 + i);
      target->kv().clear(0);
      prop.reset(0);
      ForwardOut o = test::run_forward(*target, prompt, LogitsMode::kLast, &prop.target_aux());
      prop.add_context(0, o.aux.data(), n, 0);
      const int32_t t1 = sample_token(o.logits.data(), V, sp, rng, scratch);
      Draft d;
      prop.propose(0, t1, n, 2, sp, rng, d);
      ForwardOut vo = test::run_forward(*target, {t1, d.tokens[0], d.tokens[1]}, LogitsMode::kAll);
      const VerifyResult vr = verify(d.tokens.data(), 2, vo.logits.data(), d.probs.data(), rng);
      std::vector<int32_t> toks = {t1};
      for (int j = 0; j < vr.n_accepted; ++j) toks.push_back(d.tokens[j]);
      toks.push_back(vr.next_token);
      if (toks.size() < 3) {  // a = 0: one more plain target step
        target->kv().truncate(0, n + 1);
        ForwardOut so = test::run_forward(*target, {toks[1]}, LogitsMode::kLast);
        toks.push_back(sample_token(so.logits.data(), V, sp, rng, scratch));
      }
      ++counts[{toks[0], toks[1], toks[2]}];
    }
    return counts;
  }
};

TEST(SamplingDistribution, SpeculativeMatchesTargetDistribution) {
  SpecSetup s("zlab_full", 0.25f);
  s.sp.temperature = 1.0f;
  s.sp.top_k = 4;
  const auto exact = s.exact();
  const int N = 3000;
  int64_t acc_d = 0, dr_d = 0, acc_s = 0, dr_s = 0;
  const auto plain = s.run_generator(nullptr, N, 1);
  const auto spec = s.run_generator(s.dflash.get(), N, 100001, &acc_d, &dr_d);
  const auto self = s.run_generator(s.self.get(), N, 200001, &acc_s, &dr_s);
  const auto c_plain = test::chi2_gof(plain, exact, N);
  const auto c_spec = test::chi2_gof(spec, exact, N);
  const auto c_self = test::chi2_gof(self, exact, N);
  std::printf("[T>0] T=%.1f top_k=%d, %zu outcomes, N=%d each (reject when chi2 > %.1f, df %d):\n"
              "[T>0]   target-only chi2 %.1f TV %.3f | DFlash chi2 %.1f TV %.3f (accepted %lld/%lld) | "
              "self-draft chi2 %.1f TV %.3f (accepted %lld/%lld)\n",
              s.sp.temperature, s.sp.top_k, exact.size(), N, c_plain.threshold, c_plain.df, c_plain.stat,
              test::total_variation(plain, exact, N), c_spec.stat, test::total_variation(spec, exact, N),
              (long long)acc_d, (long long)dr_d, c_self.stat, test::total_variation(self, exact, N),
              (long long)acc_s, (long long)dr_s);
  EXPECT_FALSE(c_plain.reject());
  EXPECT_FALSE(c_spec.reject());
  EXPECT_FALSE(c_self.reject());
  EXPECT_GT(acc_s, dr_s / 5) << "the self-draft proposer should be accepted often";
  EXPECT_LT(acc_s, dr_s) << "…but not always";

  // The same cycle by hand with the real verifier passes; broken verifiers are rejected.
  const SamplingParams sp = s.sp;
  const int64_t V = s.V;
  auto real = [&](const int32_t* d, int32_t n, const float* l, const float* q, Rng& rng) {
    return verify_rejection(d, n, l, q, V, sp, rng);
  };
  auto accept_all = [&](const int32_t*, int32_t n, const float* l, const float*, Rng& rng) {
    std::vector<float> p;
    sampling_probs(l + int64_t(n) * V, V, sp, p);
    return VerifyResult{n, sample_from(p.data(), V, rng)};
  };
  auto resample_from_p = [&](const int32_t* d, int32_t n, const float* l, const float* q, Rng& rng) {
    std::vector<float> p;
    for (int32_t j = 0; j < n; ++j) {
      sampling_probs(l + int64_t(j) * V, V, sp, p);
      if (rng.uniform() * q[j * V + d[j]] < p[d[j]]) continue;
      return VerifyResult{j, sample_from(p.data(), V, rng)};  // BUG: should be max(p − q, 0)
    }
    sampling_probs(l + int64_t(n) * V, V, sp, p);
    return VerifyResult{n, sample_from(p.data(), V, rng)};
  };
  const int M = 2000;
  const auto m_real = s.run_manual(*s.self, real, M, 300001);
  const auto m_all = s.run_manual(*s.self, accept_all, M, 400001);
  const auto m_res = s.run_manual(*s.self, resample_from_p, M, 500001);
  const auto m_all_d = s.run_manual(*s.dflash, accept_all, M, 600001);
  const auto c_real = test::chi2_gof(m_real, exact, M);
  const auto c_all = test::chi2_gof(m_all, exact, M);
  const auto c_res = test::chi2_gof(m_res, exact, M);
  const auto c_all_d = test::chi2_gof(m_all_d, exact, M);
  std::printf("[T>0] manual cycle, self-draft, N=%d: real verifier chi2 %.1f TV %.3f | accept-all chi2 %.1f "
              "TV %.3f | resample-from-p chi2 %.1f TV %.3f (reject > %.1f); DFlash accept-all chi2 %.1f TV %.3f\n",
              M, c_real.stat, test::total_variation(m_real, exact, M), c_all.stat,
              test::total_variation(m_all, exact, M), c_res.stat, test::total_variation(m_res, exact, M),
              c_real.threshold, c_all_d.stat, test::total_variation(m_all_d, exact, M));
  EXPECT_FALSE(c_real.reject());
  EXPECT_TRUE(c_all.reject()) << "the test cannot tell an accept-everything verifier apart";
  EXPECT_TRUE(c_res.reject()) << "the test cannot tell a verifier without the residual apart";
  EXPECT_TRUE(c_all_d.reject());
}

// T > 0 with DFlash2 drafters (model/dflash2_draft.h): drafts sampled from the candidate
// selector's softmax over its K candidates, q = that distribution (zero elsewhere); the outputs
// follow the target's distribution on a Qwen3 and on a Qwen3.5 hybrid target.
TEST(SamplingDistribution, DFlash2SpeculativeMatchesTargetDistribution) {
  const std::pair<const char*, const char*> cases[] = {{"qwen3/sharded", "dflash2/zlab_swa/draft"},
                                                       {"qwen35/flat_untied", "dflash2/qwen35_flat/draft"}};
  for (const auto& [t, d] : cases) {
    SpecSetup s(test::fixture(t), test::fixture(d), 0.25f);
    ASSERT_NE(s.dflash->drafter().dflash2(), nullptr);
    s.sp.temperature = 1.0f;
    s.sp.top_k = 4;
    const auto exact = s.exact();
    const int N = 3000;
    int64_t acc = 0, dr = 0;
    const auto spec = s.run_generator(s.dflash.get(), N, 900001, &acc, &dr);
    const auto c = test::chi2_gof(spec, exact, N);
    std::printf("[T>0 dflash2] %s: chi2 %.1f TV %.3f (accepted %lld/%lld), reject > %.1f\n", d, c.stat,
                test::total_variation(spec, exact, N), (long long)acc, (long long)dr, c.threshold);
    EXPECT_FALSE(c.reject()) << d;
    EXPECT_GT(dr, 0) << d;
    // Teeth: a verifier that accepts every DFlash2 draft is told apart.
    const SamplingParams sp = s.sp;
    const int64_t V = s.V;
    auto accept_all = [&](const int32_t*, int32_t n, const float* l, const float*, Rng& rng) {
      std::vector<float> p;
      sampling_probs(l + int64_t(n) * V, V, sp, p);
      return VerifyResult{n, sample_from(p.data(), V, rng)};
    };
    const int M = 2000;
    const auto m_all = s.run_manual(*s.dflash, accept_all, M, 950001);
    EXPECT_TRUE(test::chi2_gof(m_all, exact, M).reject()) << d;
  }
}

// T > 0 on a Qwen3.5 hybrid target (recurrent states rolled back after every rejection): the
// speculative outputs follow the target's distribution (DFlash and the often-accepted self-draft).
TEST(SamplingDistribution, Qwen35SpeculativeMatchesTargetDistribution) {
  SpecSetup s(test::fixture("qwen35/flat_untied"), test::fixture("qwen35/flat_untied_draft"), 0.25f);
  s.sp.temperature = 1.0f;
  s.sp.top_k = 4;
  const auto exact = s.exact();
  const int N = 3000;
  int64_t acc_d = 0, dr_d = 0, acc_s = 0, dr_s = 0;
  const auto spec = s.run_generator(s.dflash.get(), N, 700001, &acc_d, &dr_d);
  const auto self = s.run_generator(s.self.get(), N, 800001, &acc_s, &dr_s);
  const auto c_spec = test::chi2_gof(spec, exact, N);
  const auto c_self = test::chi2_gof(self, exact, N);
  std::printf("[T>0 qwen35] DFlash chi2 %.1f (accepted %lld/%lld) | self-draft chi2 %.1f "
              "(accepted %lld/%lld), reject > %.1f\n", c_spec.stat, (long long)acc_d,
              (long long)dr_d, c_self.stat, (long long)acc_s, (long long)dr_s, c_spec.threshold);
  EXPECT_FALSE(c_spec.reject());
  EXPECT_FALSE(c_self.reject());
  EXPECT_GT(acc_s, dr_s / 5);
  EXPECT_LT(acc_s, dr_s);
}

// T > 0 on the Gemma 4 target with its gemma-4-style drafter (mixed causal-sliding / non-causal
// full draft layers, the target's scaled embedding and soft-capped head).
TEST(SamplingDistribution, Gemma4SpeculativeMatchesTargetDistribution) {
  SpecSetup s(test::fixture("gemma4/dense_v5"), test::fixture("dflash/gemma4_mixed/draft"), 0.25f);
  s.sp.temperature = 1.0f;
  s.sp.top_k = 4;
  const auto exact = s.exact();
  const int N = 3000;
  int64_t acc_d = 0, dr_d = 0, acc_s = 0, dr_s = 0;
  const auto spec = s.run_generator(s.dflash.get(), N, 710001, &acc_d, &dr_d);
  const auto self = s.run_generator(s.self.get(), N, 810001, &acc_s, &dr_s);
  const auto c_spec = test::chi2_gof(spec, exact, N);
  const auto c_self = test::chi2_gof(self, exact, N);
  std::printf("[T>0 gemma4] DFlash chi2 %.1f (accepted %lld/%lld) | self-draft chi2 %.1f "
              "(accepted %lld/%lld), reject > %.1f\n", c_spec.stat, (long long)acc_d,
              (long long)dr_d, c_self.stat, (long long)acc_s, (long long)dr_s, c_spec.threshold);
  EXPECT_FALSE(c_spec.reject());
  EXPECT_FALSE(c_self.reject());
  EXPECT_GT(acc_s, dr_s / 5);
  EXPECT_LT(acc_s, dr_s);
}

// T > 0 on the real Gemma-3-270M with the drafter the repo ships (models/gemma3-270m-dflash:
// trained by tools/train, reduced 4,096-row head + d2t): the speculative outputs follow the
// target's distribution. Skips without the real model (tools/models/gemma3_270m.sh).
TEST(SamplingDistribution, ShippedDrafterOnRealGemma3MatchesTargetDistribution) {
  if (!file_exists(test::real_gemma3_path()))
    GTEST_SKIP() << "real model absent: run tools/models/gemma3_270m.sh";
  // "Water boils at" with BOS (HF's Gemma 3 tokenizer; tests/fixtures/gguf/gemma3_270m_llamacpp.json).
  SpecSetup s(test::real_gemma3_path(), test::repo_root() + "/models/gemma3-270m-dflash",
              {2, 17390, 104264, 657}, 0.0f, 2);
  s.expect_dflash_follows_target("shipped drafter, real Gemma-3-270M", 1500, 990001);
}

// T > 0 with a reduced-vocabulary drafter (speculators d2t): q is zero outside the draft
// vocabulary, so tokens the drafter cannot propose come only from the residual max(p − q, 0) —
// the speculative outputs still follow the target's distribution.
TEST(SamplingDistribution, ReducedVocabularyDrafterMatchesTargetDistribution) {
  SpecSetup s("speculators_d2t", 0.25f);
  s.expect_dflash_follows_target("d2t", 3000, 900001);
}

}  // namespace
}  // namespace dfl
