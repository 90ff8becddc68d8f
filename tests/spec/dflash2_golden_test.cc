// DFlash2 drafters (model/dflash2_draft.h) vs the goldens of tools/ref/make_dflash2_fixtures.py
// (PyPI speculators 0.9's own Qwen3DFlash2DecoderLayer and CandidateSelector; the walk per vLLM
// #52816): two draft cycles from the golden taps — block hidden and target-head logits ≤ 1e-4,
// selector candidates / unary / scores / q(T) ≤ 1e-4 given the reference's predecessors, greedy
// drafts identical through the proposer; config detection in both dialects and the published
// Qwen3.8-27B-DFlash2 config; refusals of inconsistent configs.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "common/golden.h"
#include "common/models.h"
#include "common/stats.h"
#include "core/error.h"
#include "model/config.h"
#include "model/dflash_draft.h"
#include "model/model.h"
#include "spec/dflash_proposer.h"

namespace dfl {
namespace {

using test::Golden;
using test::max_abs_diff;

constexpr double kTol = 1e-4;

struct Pair {
  std::string dir;
  nlohmann::json meta;
  std::unique_ptr<ThreadPool> pool = test::make_pool();
  std::unique_ptr<CausalLM> target;
  std::unique_ptr<DFlashProposer> proposer;
  DFlashDraftModel* draft = nullptr;
  explicit Pair(const std::string& name) {
    dir = test::fixture("dflash2/" + name);
    meta = test::read_json(dir + "/meta.json");
    target = load_causal_lm(test::repo_root() + "/" + meta.at("target").get<std::string>(), {}, *pool);
    auto d = std::make_unique<DFlashDraftModel>(dir + "/draft", *target, LoadOptions{}, *pool);
    draft = d.get();
    proposer = std::make_unique<DFlashProposer>(std::move(d), *target);
  }
};

// One cycle: the drafter's block pass, then the selector given the golden predecessors.
void check_cycle(Pair& p, Golden& g, const std::string& c, int32_t pos0, double* worst) {
  const auto block = g.i32(c + "block_ids");
  const int32_t B = int32_t(block.size()), H = p.draft->config().hidden_size;
  const int64_t V = p.target->config().vocab_size;
  std::vector<float> hidden(size_t(B) * H), logits(size_t(B - 1) * V);
  p.draft->draft_block(0, block.data(), B, pos0, *p.target, logits.data(), hidden.data());
  const double eh = max_abs_diff(hidden, g.f32(c + "block_hidden"));
  const double el = max_abs_diff(logits, g.f32(c + "logits"));
  EXPECT_LE(eh, kTol) << c;
  EXPECT_LE(el, kTol) << c;

  const DFlash2Parts& v2 = *p.draft->dflash2();
  const int32_t K = v2.spec().selector_top_k, r = v2.spec().selector_rank;
  const auto cand = g.i32(c + "candidates"), ids = g.i32(c + "draft_ids");
  const auto unary = g.f32(c + "unary"), scores = g.f32(c + "scores"), q = g.f32(c + "q");
  const float T = p.meta.at("sample_temperature").get<float>();
  std::vector<float> proj(size_t(B - 1) * r), qk;
  v2.project(hidden.data() + H, B - 1, proj.data(), *p.pool);
  double eu = 0, es = 0, eq = 0;
  int32_t prev = block[0];
  std::vector<int32_t> greedy;
  for (int32_t j = 0; j < B - 1; ++j) {
    SelectorRow row;
    v2.score(logits.data() + j * V, V, proj.data() + size_t(j) * r, prev, row);
    EXPECT_EQ(row.ids, std::vector<int32_t>(cand.begin() + j * K, cand.begin() + (j + 1) * K)) << c << j;
    DFlash2Parts::distribution(row, T, qk);
    for (int32_t k = 0; k < K; ++k) {
      eu = std::max(eu, double(std::abs(row.unary[k] - unary[size_t(j) * V + row.ids[k]])));  // [n, V]
      es = std::max(es, double(std::abs(row.scores[k] - scores[size_t(j) * K + k])));
      eq = std::max(eq, double(std::abs(qk[k] - q[size_t(j) * K + k])));
    }
    greedy.push_back(row.ids[DFlash2Parts::best(row)]);
    prev = ids[j];  // the reference's greedy predecessor
  }
  EXPECT_LE(eu, kTol) << c;
  EXPECT_LE(es, kTol) << c;
  EXPECT_LE(eq, kTol) << c;
  EXPECT_EQ(greedy, ids) << c;
  EXPECT_NE(ids, g.i32(c + "unary_argmax_ids")) << "the selector must change some drafts";
  for (double e : {eh, el, eu, es, eq}) *worst = std::max(*worst, e);
}

class DFlash2Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(DFlash2Golden, TwoCyclesForwardAndSelector) {
  Pair p(GetParam());
  Golden g(p.dir + "/golden.safetensors");
  ASSERT_NE(p.draft->dflash2(), nullptr);
  EXPECT_EQ(p.draft->dflash().dialect, p.meta.at("dialect").get<std::string>());
  const auto taps = g.f32("taps");
  const int32_t n = p.meta.at("n_prompt").get<int32_t>();
  const int32_t a = p.meta.at("accepted_in_cycle1").get<int32_t>();
  p.draft->append_context(0, taps.data(), n, 0);
  double worst = 0;
  check_cycle(p, g, "c1_", n, &worst);
  const auto taps2 = g.f32("cycle2_taps");
  p.draft->append_context(0, taps2.data(), a + 1, n);
  ASSERT_EQ(g.scalar_i32("c2_start_pos"), n + a + 1);
  check_cycle(p, g, "c2_", n + a + 1, &worst);
  std::printf("[dflash2/%s] max |Δ| over hidden, logits, unary, scores, q: %.3g (tol %.0e)\n",
              GetParam().c_str(), worst, kTol);
}

// The proposer drafts the selector's greedy path (cycle 1), and at T > 0 reports q rows that
// sum to 1 over the K candidates of each row with the sampled token among them.
TEST_P(DFlash2Golden, ProposerGreedyAndSampled) {
  Pair p(GetParam());
  Golden g(p.dir + "/golden.safetensors");
  const auto taps = g.f32("taps");
  const int32_t n = p.meta.at("n_prompt").get<int32_t>();
  const auto block = g.i32("c1_block_ids");
  const int32_t nd = int32_t(block.size()) - 1;
  p.proposer->add_context(0, taps.data(), n, 0);
  SamplingParams greedy;
  Rng rng(1);
  Draft d;
  p.proposer->propose(0, block[0], n, nd, greedy, rng, d);
  EXPECT_EQ(d.tokens, g.i32("c1_draft_ids"));
  EXPECT_TRUE(d.probs.empty());
  SamplingParams hot;
  hot.temperature = 0.7f;
  const int64_t V = p.target->config().vocab_size;
  const int32_t K = p.draft->dflash2()->spec().selector_top_k;
  for (int rep = 0; rep < 5; ++rep) {
    p.proposer->propose(0, block[0], n, nd, hot, rng, d);
    ASSERT_EQ(d.probs.size(), size_t(nd) * V);
    for (int32_t j = 0; j < nd; ++j) {
      double sum = 0;
      int nonzero = 0;
      for (int64_t t = 0; t < V; ++t) {
        sum += d.probs[j * V + t];
        nonzero += d.probs[j * V + t] > 0;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
      EXPECT_LE(nonzero, K);
      EXPECT_GT(d.probs[j * V + d.tokens[j]], 0.0f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DFlash2Golden, ::testing::Values("zlab_swa", "speculators_full"));

TEST(DFlash2Config, BothDialectsDetected) {
  const ModelConfig z = load_model_config(test::fixture("dflash2/zlab_swa/draft"));
  ASSERT_TRUE(z.dflash && z.dflash->v2);
  EXPECT_EQ(z.family, Family::kDFlashDraft);
  EXPECT_EQ(z.dflash->dialect, "z-lab");
  EXPECT_EQ(z.dflash->v2->conv_kernel_size, 2);
  EXPECT_EQ(z.dflash->v2->conv_group_size, 16);
  EXPECT_EQ(z.dflash->v2->selector_rank, 16);
  EXPECT_EQ(z.dflash->v2->selector_top_k, 4);
  EXPECT_FLOAT_EQ(z.dflash->v2->output_multiplier, 0.9f);
  EXPECT_FLOAT_EQ(z.dflash->v2->final_logit_softcap, 4.0f);
  const ModelConfig s = load_model_config(test::fixture("dflash2/speculators_full/draft"));
  ASSERT_TRUE(s.dflash && s.dflash->v2);
  EXPECT_EQ(s.dflash->dialect, "speculators");
  EXPECT_EQ(s.dflash->speculators_type, "dflash2");
  EXPECT_EQ(s.dflash->target_layer_ids, (std::vector<int32_t>{0, 1}));  // aux − 1
  EXPECT_EQ(s.dflash->v2->conv_kernel_size, 3);
  EXPECT_EQ(s.dflash->v2->selector_top_k, 6);
  EXPECT_FLOAT_EQ(s.dflash->v2->output_multiplier, 1.0f);
  EXPECT_EQ(s.dflash->v2->final_logit_softcap, 0.0f);
  // A plain DFlash drafter is not DFlash2.
  EXPECT_FALSE(load_model_config(test::fixture("dflash/zlab_full/draft")).dflash->v2);
}

TEST(DFlash2Config, PublishedQwen38Drafter) {
  const ModelConfig c = load_model_config(test::fixture("configs/Qwen3.8-27B-DFlash2"));
  ASSERT_TRUE(c.dflash && c.dflash->v2);
  EXPECT_EQ(c.dflash->block_size, 8);
  EXPECT_EQ(c.dflash->mask_token_id, 248070);
  EXPECT_EQ(c.dflash->target_layer_ids, (std::vector<int32_t>{5, 19, 33, 47, 61}));
  EXPECT_EQ(c.dflash->v2->conv_kernel_size, 2);
  EXPECT_EQ(c.dflash->v2->conv_group_size, 16);
  EXPECT_EQ(c.dflash->v2->selector_rank, 256);
  EXPECT_EQ(c.dflash->v2->selector_top_k, 16);
  ASSERT_EQ(c.n_layers, 5);
  for (const LayerSpec& l : c.layers) {
    EXPECT_EQ(l.attn, AttnKind::kSliding);
    EXPECT_EQ(l.rope.theta, 1e7f);
  }
}

// Edits of the z-lab fixture config that must be refused with the key named.
TEST(DFlash2Config, InconsistentConfigsRefused) {
  const std::string src = test::fixture("dflash2/zlab_swa/draft");
  const auto base = test::read_json(src + "/config.json");
  const std::string tmp = ::testing::TempDir() + "/dflash2_cfg";
  std::filesystem::create_directories(tmp);
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* want;
  };
  for (const Case& k : {Case{"conv_group_size", nullptr, "conv_group_size"},
                        Case{"selector_top_k", nullptr, "selector_top_k"},
                        Case{"final_logit_softcapping", -1.0, "final_logit_softcapping"},
                        Case{"conv_kernel_size", -2, "conv_kernel_size"}}) {
    nlohmann::json j = base;
    if (k.value.is_null()) j["dflash_config"].erase(k.key);
    else j["dflash_config"][k.key] = k.value;
    std::ofstream(tmp + "/config.json") << j.dump();
    try {
      load_model_config(tmp);
      ADD_FAILURE() << k.key << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(k.want), std::string::npos) << e.what();
    }
  }
  // A group size that does not divide the hidden size is refused at load.
  nlohmann::json j = base;
  j["dflash_config"]["conv_group_size"] = 24;
  std::ofstream(tmp + "/config.json") << j.dump();
  std::filesystem::copy_file(src + "/model.safetensors", tmp + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  auto pool = test::make_pool(1);
  auto target = load_causal_lm(test::fixture("qwen3/sharded"), {}, *pool);
  try {
    DFlashDraftModel d(tmp, *target, LoadOptions{}, *pool);
    ADD_FAILURE() << "group 24 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv_group_size"), std::string::npos) << e.what();
  }
}


// At T > 0 the proposer's drafts are draws from the q rows it reports (the condition for exact
// rejection sampling): χ² of (first, second) drafted tokens over N proposals against
// q_1(t1) · q_2(t2 | t1) as reported; the same counts against the unary-only softmax (the
// selector's transition term dropped) must be rejected.
TEST(DFlash2Sampling, ProposerDrawsFromTheQItReports) {
  Pair p("zlab_swa");
  Golden g(p.dir + "/golden.safetensors");
  const auto taps = g.f32("taps");
  const int32_t n = p.meta.at("n_prompt").get<int32_t>();
  const int32_t anchor = g.i32("c1_block_ids")[0];
  p.proposer->add_context(0, taps.data(), n, 0);
  const int64_t V = p.target->config().vocab_size;
  SamplingParams hot;
  hot.temperature = 3.0f;  // spreads the selector's peaked q over more candidates
  Rng rng(7);
  std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
  std::map<std::pair<int32_t, int32_t>, double> joint;
  std::map<int32_t, int64_t> firsts;
  std::vector<float> q1;
  const int N = 4000;
  Draft d;
  for (int i = 0; i < N; ++i) {
    p.proposer->propose(0, anchor, n, 2, hot, rng, d);
    ASSERT_EQ(d.probs.size(), size_t(2 * V));
    if (q1.empty()) q1.assign(d.probs.begin(), d.probs.begin() + V);
    ASSERT_TRUE(std::equal(q1.begin(), q1.end(), d.probs.begin())) << "row 1 depends only on the anchor";
    const int32_t t1 = d.tokens[0], t2 = d.tokens[1];
    ++pairs[{t1, t2}];
    ++firsts[t1];
    if (!joint.count({t1, -1})) {
      joint[{t1, -1}] = 0;  // marker: t1's row 2 recorded
      for (int64_t t = 0; t < V; ++t)
        if (d.probs[V + t] > 0) joint[{t1, int32_t(t)}] = double(q1[t1]) * d.probs[V + t];
    }
  }
  for (auto it = joint.begin(); it != joint.end();) it = it->first.second < 0 ? joint.erase(it) : std::next(it);
  // Pairs whose t1 never came up carry the rest of the mass: one pooled bin.
  double seen = 0;
  for (const auto& [k, v] : joint) seen += v;
  joint[{-1, -1}] = std::max(0.0, 1.0 - seen);
  const auto c = test::chi2_gof(pairs, joint, N);
  EXPECT_FALSE(c.reject()) << "chi2 " << c.stat << " > " << c.threshold;
  // Teeth: the unary-only distribution of the first token.
  const auto unary = g.f32("c1_unary");
  const auto cand = g.i32("c1_candidates");
  const int32_t K = p.draft->dflash2()->spec().selector_top_k;
  std::map<int32_t, double> uq;
  double z = 0;
  for (int32_t k = 0; k < K; ++k) z += std::exp(double(unary[cand[k]]) / hot.temperature);
  for (int32_t k = 0; k < K; ++k) uq[cand[k]] = std::exp(double(unary[cand[k]]) / hot.temperature) / z;
  const auto cu = test::chi2_gof(firsts, uq, N);
  EXPECT_TRUE(cu.reject()) << "chi2 vs unary-only " << cu.stat;
  std::printf("[dflash2 T=3] drafts vs reported q: chi2 %.1f (df %d, reject > %.1f); vs unary-only softmax: "
              "chi2 %.1f\n", c.stat, c.df, c.threshold, cu.stat);
}


// The llama.cpp-style GGUF twin of zlab_swa (tools/ref/make_dflash2_fixtures.py gguf): the DFlash2
// keys and tensor names are mapped onto the same model; block hidden and logits bit-identical.
// (The GGUF dialect has no output_multiplier / softcap key, so the selector's unary differs.)
TEST(DFlash2Gguf, SameDrafterAsTheSafetensors) {
  const ModelConfig a = load_model_config(test::fixture("dflash2/zlab_swa/draft"));
  const ModelConfig b = load_model_config(test::fixture("dflash2/zlab_swa_gguf/draft.gguf"));
  ASSERT_TRUE(b.dflash && b.dflash->v2);
  EXPECT_EQ(b.architecture, "DFlash2DraftModel");
  EXPECT_EQ(b.dflash->v2->conv_kernel_size, a.dflash->v2->conv_kernel_size);
  EXPECT_EQ(b.dflash->v2->conv_group_size, a.dflash->v2->conv_group_size);
  EXPECT_EQ(b.dflash->v2->selector_rank, a.dflash->v2->selector_rank);
  EXPECT_EQ(b.dflash->v2->selector_top_k, a.dflash->v2->selector_top_k);
  EXPECT_EQ(b.dflash->target_layer_ids, a.dflash->target_layer_ids);
  for (int32_t il = 0; il < a.n_layers; ++il) {
    EXPECT_EQ(b.layers[il].attn, a.layers[il].attn);
    EXPECT_EQ(b.layers[il].window, a.layers[il].window);
  }
  auto pool = test::make_pool(1);
  auto target = load_causal_lm(test::fixture("qwen3/sharded"), {}, *pool);
  DFlashDraftModel da(test::fixture("dflash2/zlab_swa/draft"), *target, LoadOptions{}, *pool);
  DFlashDraftModel db(test::fixture("dflash2/zlab_swa_gguf/draft.gguf"), *target, LoadOptions{}, *pool);
  Golden g(test::fixture("dflash2/zlab_swa/golden.safetensors"));
  const auto taps = g.f32("taps");
  const auto block = g.i32("c1_block_ids");
  const int32_t n = int32_t(g.i32("prompt_ids").size()), B = int32_t(block.size());
  const int64_t V = target->config().vocab_size, H = da.config().hidden_size;
  std::vector<float> la(size_t(B - 1) * V), lb(la.size()), ha(size_t(B) * H), hb(ha.size());
  for (auto [d, l, h] : {std::tuple{&da, &la, &ha}, std::tuple{&db, &lb, &hb}}) {
    d->append_context(0, taps.data(), n, 0);
    d->draft_block(0, block.data(), B, n, *target, l->data(), h->data());
  }
  EXPECT_EQ(ha, hb);
  EXPECT_EQ(la, lb);
}

}  // namespace
}  // namespace dfl
