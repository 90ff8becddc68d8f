// Reduced-vocabulary drafters (speculators `draft_vocab_size` < vocab, own lm_head + d2t/t2d)
// against the PyPI `speculators` 0.9.0 package's own forward (tools/ref/make_speculators_fixtures.py,
// tests/fixtures/dflash/speculators_d2t on the Qwen3 target, speculators_d2t_qwen35 on the Qwen3.5
// hybrid target with block 16): the speculators-dialect folder as the package saved it and
// the same drafter in the z-lab layout (draft_vocab_size + d2t, no t2d). Block logits ≤ 1e-4 over
// the draft vocabulary, draft ids identical, mapped to target ids by target = draft + d2t[draft];
// the proposer's drafts and its sparse q; refusal of inconsistent maps.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/golden.h"
#include "common/models.h"
#include "core/error.h"
#include "engine/generator.h"
#include "model/dflash_draft.h"
#include "model/model.h"
#include "spec/dflash_proposer.h"

namespace dfl {
namespace {

using test::Golden;
using test::max_abs_diff;

constexpr double kTol = 1e-4;

std::string fixture_dir(const std::string& name = "speculators_d2t") { return test::fixture("dflash/" + name); }

struct Loaded {
  explicit Loaded(const std::string& name = "speculators_d2t") : dir(fixture_dir(name)) {}
  std::string dir;
  nlohmann::json meta = test::read_json(dir + "/meta.json");
  std::unique_ptr<ThreadPool> pool = test::make_pool();
  std::unique_ptr<CausalLM> target =
      load_causal_lm(test::repo_root() + "/" + meta.at("target").get<std::string>(), LoadOptions{}, *pool);
  std::unique_ptr<DFlashDraftModel> load(const std::string& dir) {
    return std::make_unique<DFlashDraftModel>(dir, *target, LoadOptions{}, *pool);
  }
};

// (fixture, layout)
class SpeculatorsD2t : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(SpeculatorsD2t, TwoCyclesMatchThePackage) {
  const auto& [fixture, layout] = GetParam();
  Loaded s(fixture);
  Golden g(s.dir + "/golden.safetensors");
  auto d = s.load(s.dir + "/" + layout);
  const int32_t Vd = s.meta.at("draft_vocab_size").get<int32_t>();
  const int32_t V = s.target->config().vocab_size, H = d->config().hidden_size;
  EXPECT_EQ(d->dflash().dialect, layout == "draft" ? "speculators" : "z-lab");
  EXPECT_EQ(d->dflash().draft_vocab_size, Vd);
  EXPECT_EQ(d->dflash().block_size, s.meta.at("block_size").get<int32_t>());
  ASSERT_TRUE(d->own_head());
  ASSERT_EQ(d->out_vocab(), Vd);
  // target = draft + d2t[draft]
  const auto d2t = g.i64("d2t");
  ASSERT_EQ(int32_t(d2t.size()), Vd);
  for (int32_t i = 0; i < Vd; ++i) ASSERT_EQ(d->draft_to_target()[i], i + d2t[i]) << i;

  const auto prompt = g.i32("prompt_ids");
  const int32_t n = int32_t(prompt.size());
  const auto taps = g.f32("taps");
  d->append_context(0, taps.data(), n, 0);
  auto run = [&](const std::vector<int32_t>& block, int32_t pos0, std::vector<float>& hidden) {
    const int32_t B = int32_t(block.size());
    std::vector<float> logits(size_t(B - 1) * Vd);
    hidden.resize(size_t(B) * H);
    d->draft_block(0, block.data(), B, pos0, *s.target, logits.data(), hidden.data());
    return logits;
  };
  auto mapped = [&](const std::vector<float>& logits, int32_t rows) {
    std::vector<int32_t> ids = test::argmax_rows(logits.data(), rows, Vd);
    for (int32_t& t : ids) t = d->draft_to_target()[t];
    return ids;
  };
  std::vector<float> h1, h2;
  const auto l1 = run(g.i32("block_ids"), n, h1);
  const int32_t B = int32_t(g.i32("block_ids").size());
  const double e1 = max_abs_diff(l1, g.f32("block_logits"));
  EXPECT_LE(e1, kTol);
  EXPECT_EQ(test::argmax_rows(l1.data(), B - 1, Vd), g.i32("draft_ids"));
  EXPECT_EQ(mapped(l1, B - 1), g.i32("draft_target_ids"));

  // The target's head on the same rows, gathered at the mapped ids, is NOT the drafter's head
  // (so a drafter that fell back to the target's lm_head could not pass).
  std::vector<float> tl(size_t(B - 1) * V), gathered(size_t(B - 1) * Vd);
  s.target->lm_head(h1.data() + H, B - 1, tl.data());
  for (int32_t r = 0; r < B - 1; ++r)
    for (int32_t i = 0; i < Vd; ++i) gathered[size_t(r) * Vd + i] = tl[size_t(r) * V + d->draft_to_target()[i]];
  EXPECT_GT(max_abs_diff(gathered, g.f32("block_logits")), 0.1);

  const int32_t s2 = g.scalar_i32("cycle2_start_pos");
  const auto new_taps = g.f32("cycle2_new_ctx_taps");
  d->append_context(0, new_taps.data(), s2 - n, n);
  const auto l2 = run(g.i32("cycle2_block_ids"), s2, h2);
  const double e2 = max_abs_diff(l2, g.f32("cycle2_block_logits"));
  EXPECT_LE(e2, kTol);
  EXPECT_EQ(mapped(l2, B - 1), g.i32("cycle2_draft_target_ids"));
  std::printf("[%s/%s] draft vocab %d of %d: cycle1 max|Δlogits| %.3g, cycle2 %.3g "
              "(tol %.0e); target head at mapped ids differs by %.3g\n",
              fixture.c_str(), layout.c_str(), Vd, V, e1, e2, kTol, max_abs_diff(gathered, g.f32("block_logits")));
}

INSTANTIATE_TEST_SUITE_P(Layouts, SpeculatorsD2t,
                         ::testing::Combine(::testing::Values("speculators_d2t", "speculators_d2t_qwen35"),
                                            ::testing::Values("draft", "draft_zlab")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// The proposer: greedy drafts are the mapped argmax; at T > 0 q lives on the mapped ids only
// (zero elsewhere, sums to 1) and each draft is one of them with q > 0.
TEST(SpeculatorsD2tProposer, GreedyAndSparseQ) {
  Loaded s;
  Golden g(fixture_dir() + "/golden.safetensors");
  DFlashProposer prop(s.load(fixture_dir() + "/draft"), *s.target);
  const auto prompt = g.i32("prompt_ids");
  const int32_t n = int32_t(prompt.size()), V = s.target->config().vocab_size;
  const auto taps = g.f32("taps");
  prop.add_context(0, taps.data(), n, 0);
  SamplingParams greedy;
  Rng rng(7);
  Draft out;
  prop.propose(0, g.scalar_i32("anchor"), n, prop.max_draft(), greedy, rng, out);
  EXPECT_EQ(out.tokens, g.i32("draft_target_ids"));
  EXPECT_TRUE(out.probs.empty());

  std::vector<uint8_t> in_draft(size_t(V), 0);
  for (int32_t t : prop.drafter().draft_to_target()) in_draft[size_t(t)] = 1;
  SamplingParams sp;
  sp.temperature = 1.0f;
  for (int rep = 0; rep < 20; ++rep) {
    prop.propose(0, g.scalar_i32("anchor"), n, prop.max_draft(), sp, rng, out);
    ASSERT_EQ(out.probs.size(), size_t(prop.max_draft()) * V);
    for (int32_t k = 0; k < prop.max_draft(); ++k) {
      const float* q = out.probs.data() + size_t(k) * V;
      double sum = 0;
      for (int32_t t = 0; t < V; ++t) {
        if (!in_draft[t]) ASSERT_EQ(q[t], 0.0f) << "q outside the draft vocabulary";
        sum += q[t];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
      ASSERT_TRUE(in_draft[size_t(out.tokens[k])]);
      EXPECT_GT(q[out.tokens[k]], 0.0f);
    }
  }
}

// Copies a drafter folder and overwrites bytes of one tensor's data (or its name in the header).
struct PatchedDraft {
  test::TempDir dir{"d2t"};
  std::string bytes;
  size_t data0 = 0;
  nlohmann::json header;
  explicit PatchedDraft(const std::string& src) {
    for (const auto& e : std::filesystem::directory_iterator(src))
      std::filesystem::copy_file(e.path(), dir.path() / e.path().filename());
    std::ifstream f(dir.file("model.safetensors"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
    uint64_t hlen = 0;
    std::memcpy(&hlen, bytes.data(), 8);
    header = nlohmann::json::parse(bytes.substr(8, hlen));
    data0 = 8 + hlen;
  }
  template <typename T>
  void set(const std::string& tensor, size_t index, T value) {
    const size_t off = data0 + header.at(tensor).at("data_offsets")[0].get<size_t>() + index * sizeof(T);
    std::memcpy(bytes.data() + off, &value, sizeof(T));
  }
  void rename(const std::string& from, const std::string& to) {  // same length
    const size_t p = bytes.find("\"" + from + "\"");
    ASSERT_NE(p, std::string::npos);
    bytes.replace(p + 1, from.size(), to);
  }
  std::string write() {
    std::ofstream(dir.file("model.safetensors"), std::ios::binary) << bytes;
    return dir.str();
  }
};

TEST(SpeculatorsD2tRefusals, InconsistentMapsAreClearErrors) {
  Loaded s;
  Golden g(fixture_dir() + "/golden.safetensors");
  const auto d2t = g.i64("d2t");
  const int32_t V = s.target->config().vocab_size;
  auto expect_error = [&](const std::string& dir, const std::string& needle) {
    try {
      s.load(dir);
      ADD_FAILURE() << "loaded a drafter that should be refused (" << needle << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {  // a target id past the vocabulary
    PatchedDraft p(fixture_dir() + "/draft_zlab");
    p.set<int64_t>("d2t", 0, int64_t(V));
    expect_error(p.write(), "outside the target vocabulary");
  }
  {  // two draft ids on one target id
    PatchedDraft p(fixture_dir() + "/draft_zlab");
    p.set<int64_t>("d2t", 1, d2t[0] - 1);
    expect_error(p.write(), "maps two draft ids");
  }
  {  // t2d disagreeing with d2t
    PatchedDraft p(fixture_dir() + "/draft");
    p.set<uint8_t>("t2d", size_t(d2t[0]), 0);
    expect_error(p.write(), "disagrees with d2t");
  }
  {  // no lm_head of its own
    PatchedDraft p(fixture_dir() + "/draft_zlab");
    p.rename("lm_head.weight", "lm_hexd.weight");
    expect_error(p.write(), "needs its own head");
  }
}

// sample_from_anchor (speculators' DSpark-style flag): block slot k predicts position p + k + 1, so
// the drafts are block rows 0..B−2 instead of 1..B−1 — the same forward, selected one row earlier
// (the forward itself is the package-checked one above). The flagged copy of the package's
// folder: its logits rows are the plain drafter's shifted by one, row 0 is the anchor slot's own
// prediction (the drafter's head on hidden row 0), and speculative decoding stays lossless.
TEST(SpeculatorsSampleFromAnchor, DraftsComeFromTheAnchorSlotOn) {
  Loaded s;
  Golden g(s.dir + "/golden.safetensors");
  test::TempDir tmp("sfa");
  std::filesystem::copy(s.dir + "/draft", tmp.str(), std::filesystem::copy_options::recursive);
  nlohmann::json cfg = test::read_json(tmp.file("config.json"));
  cfg["sample_from_anchor"] = true;
  std::ofstream(tmp.file("config.json")) << cfg.dump(2);
  auto plain = s.load(s.dir + "/draft");
  auto flagged = s.load(tmp.str());
  ASSERT_TRUE(flagged->dflash().sample_from_anchor);
  const int32_t Vd = flagged->out_vocab(), H = flagged->config().hidden_size;
  const auto prompt = g.i32("prompt_ids");
  const auto taps = g.f32("taps");
  const auto block = g.i32("block_ids");
  const int32_t n = int32_t(prompt.size()), B = int32_t(block.size());
  std::vector<float> lp(size_t(B - 1) * Vd), lf(size_t(B - 1) * Vd), hp(size_t(B) * H), hf(size_t(B) * H);
  plain->append_context(0, taps.data(), n, 0);
  flagged->append_context(0, taps.data(), n, 0);
  plain->draft_block(0, block.data(), B, n, *s.target, lp.data(), hp.data());
  flagged->draft_block(0, block.data(), B, n, *s.target, lf.data(), hf.data());
  EXPECT_EQ(hp, hf);  // the same forward
  for (int32_t r = 1; r < B - 1; ++r)
    for (int32_t i = 0; i < Vd; ++i)
      ASSERT_EQ(lf[size_t(r) * Vd + i], lp[size_t(r - 1) * Vd + i]) << "row " << r;
  EXPECT_GT(max_abs_diff(std::vector<float>(lf.begin(), lf.begin() + Vd),
                         std::vector<float>(lp.begin(), lp.begin() + Vd)), 1e-3);  // row 0: the anchor slot

  // Lossless end to end with the flagged drafter (T = 0, every block size).
  Generator plain_gen(*s.target, nullptr);
  GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = 24;
  const GenerateResult want = plain_gen.generate(req);
  DFlashProposer prop(s.load(tmp.str()), *s.target);
  Generator spec(*s.target, &prop);
  for (int32_t b = 1; b <= flagged->dflash().block_size; ++b) {
    req.block_size = b;
    EXPECT_EQ(spec.generate(req).tokens, want.tokens) << "block " << b;
  }
}

}  // namespace
}  // namespace dfl
