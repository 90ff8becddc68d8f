// DFlash drafter vs the reference goldens (docs/FIXTURES.md, tests/fixtures/dflash/<name>):
// two draft cycles from the golden taps, the taps from OUR target (pins the "+1" tap rule), the
// MiMo features, and refusal of drafters that do not fit the target.
//
// Tolerances: block_hidden (final-normed, O(1)) and block_logits (O(1–10)) max abs ≤ 1e-4;
// taps (residual stream, O(1–10)) ≤ 1e-4; draft_ids exact.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "common/golden.h"
#include "common/models.h"
#include "core/error.h"
#include "model/dflash_draft.h"
#include "model/model.h"

namespace dfl {
namespace {

using test::Golden;
using test::max_abs_diff;

constexpr double kTol = 1e-4;

struct Pair {
  std::string name, dir, target_dir;
  nlohmann::json meta;
  std::unique_ptr<ThreadPool> pool = test::make_pool();
  std::unique_ptr<CausalLM> target;
  std::unique_ptr<DFlashDraftModel> draft;
  explicit Pair(const std::string& n, LoadOptions opts = {}) : name(n) {
    dir = test::fixture("dflash/" + n);
    meta = test::read_json(dir + "/meta.json");
    target_dir = test::repo_root() + "/" + meta.at("target").get<std::string>();
    target = load_causal_lm(target_dir, opts, *pool);
    draft = std::make_unique<DFlashDraftModel>(dir + "/draft", *target, opts, *pool);
  }
};

struct BlockOut {
  std::vector<float> hidden, logits;
  std::vector<int32_t> ids;
};

BlockOut run_block(Pair& p, const std::vector<int32_t>& block, int32_t pos0) {
  const int32_t B = static_cast<int32_t>(block.size()), H = p.draft->config().hidden_size;
  const int32_t V = p.target->config().vocab_size;
  BlockOut o;
  o.hidden.resize(size_t(B) * H);
  o.logits.resize(size_t(B - 1) * V);
  p.draft->draft_block(0, block.data(), B, pos0, *p.target, o.logits.data(), o.hidden.data());
  o.ids = test::argmax_rows(o.logits.data(), B - 1, V);
  return o;
}

class DFlashGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(DFlashGolden, TwoCyclesFromGoldenTaps) {
  Pair p(GetParam());
  Golden g(p.dir + "/golden.safetensors");
  const auto prompt = g.i32("prompt_ids");
  const int32_t n = static_cast<int32_t>(prompt.size());
  EXPECT_EQ(p.draft->dflash().target_layer_ids, g.i32("target_layer_ids"));
  const auto taps = g.f32("taps");
  ASSERT_EQ(taps.size() % n, 0u);
  p.draft->append_context(0, taps.data(), n, 0);
  EXPECT_EQ(p.draft->kv().length(0), n);

  // Cycle 1.
  const BlockOut c1 = run_block(p, g.i32("block_ids"), n);
  EXPECT_EQ(p.draft->kv().length(0), n) << "draft_block must leave only the context cached";
  const double e_h1 = max_abs_diff(c1.hidden, g.f32("block_hidden"));
  const double e_l1 = max_abs_diff(c1.logits, g.f32("block_logits"));
  EXPECT_LE(e_h1, kTol);
  EXPECT_LE(e_l1, kTol);
  EXPECT_EQ(c1.ids, g.i32("draft_ids"));

  // Cycle 2: a2 + 1 new context rows at n.., block at s2.
  const int32_t a2 = g.scalar_i32("cycle2_accepted");
  const int32_t ctx0 = g.scalar_i32("cycle2_ctx_start_pos");
  const int32_t s2 = g.scalar_i32("cycle2_start_pos");
  ASSERT_EQ(ctx0, n);
  ASSERT_EQ(s2, n + a2 + 1);
  const auto new_taps = g.f32("cycle2_new_ctx_taps");
  p.draft->append_context(0, new_taps.data(), a2 + 1, ctx0);
  const BlockOut c2 = run_block(p, g.i32("cycle2_block_ids"), s2);
  const double e_h2 = max_abs_diff(c2.hidden, g.f32("cycle2_block_hidden"));
  const double e_l2 = max_abs_diff(c2.logits, g.f32("cycle2_block_logits"));
  EXPECT_LE(e_h2, kTol);
  EXPECT_LE(e_l2, kTol);
  EXPECT_EQ(c2.ids, g.i32("cycle2_draft_ids"));
  std::printf("[dflash/%s] cycle1 max|Δhidden|=%.3g max|Δlogits|=%.3g; cycle2 %.3g / %.3g "
              "(|logits|max=%.3g, tol %.0e); draft ids %s\n",
              GetParam().c_str(), e_h1, e_l1, e_h2, e_l2, test::max_abs(c1.logits), kTol,
              c1.ids == g.i32("draft_ids") && c2.ids == g.i32("cycle2_draft_ids") ? "identical" : "DIFFER");
}

// Taps computed by our target with the drafter's aux indices equal the golden taps; the same
// for the cycle-2 context rows. The drafter must ask for aux = target_layer_id + 1; a drafter
// that used layer t−1's output (aux t) or the embedding (aux 0) would fail here.
TEST_P(DFlashGolden, OurTargetProducesTheGoldenTaps) {
  Pair p(GetParam());
  Golden g(p.dir + "/golden.safetensors");
  Golden tg(p.target_dir + "/golden.safetensors");
  const auto prompt = g.i32("prompt_ids");
  EXPECT_EQ(prompt, tg.i32("prompt_ids"));
  const int32_t n = static_cast<int32_t>(prompt.size());
  const auto& aux = p.draft->target_aux_indices();
  const auto ids = g.i32("target_layer_ids");
  ASSERT_EQ(aux.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(aux[i], ids[i] + 1) << "the +1 tap rule";

  ForwardOut out = test::run_forward(*p.target, prompt, LogitsMode::kLast, &aux);
  const auto taps = g.f32("taps");
  const double e = max_abs_diff(out.aux, taps);
  EXPECT_LE(e, kTol);
  // The alternatives really are different (so this test has teeth): aux = t (one layer early).
  std::vector<int32_t> early;
  for (int32_t t : ids) early.push_back(t);
  p.target->kv().clear(0);
  ForwardOut wrong = test::run_forward(*p.target, prompt, LogitsMode::kNone, &early);
  EXPECT_GT(max_abs_diff(wrong.aux, taps), 1e-2);

  // Cycle-2 context rows: anchor + a2 accepted target tokens at n.. (continuing the cache).
  const int32_t a2 = g.scalar_i32("cycle2_accepted");
  const auto greedy = tg.i32("greedy_ids");
  EXPECT_EQ(g.scalar_i32("anchor"), greedy[0]);
  std::vector<int32_t> acc(greedy.begin(), greedy.begin() + a2 + 1);
  p.target->kv().truncate(0, n);
  ForwardOut c2 = test::run_forward(*p.target, acc, LogitsMode::kNone, &aux);
  const double e2 = max_abs_diff(c2.aux, g.f32("cycle2_new_ctx_taps"));
  EXPECT_LE(e2, kTol);
  std::printf("[dflash/%s] our taps vs golden: %.3g, cycle-2 rows %.3g; aux=t instead of t+1: %.3g\n",
              GetParam().c_str(), e, e2, max_abs_diff(wrong.aux, taps));
}

// The whole pipeline on our own numbers: our taps → our drafter → the golden draft ids.
TEST_P(DFlashGolden, EndToEndFromOurTaps) {
  Pair p(GetParam());
  Golden g(p.dir + "/golden.safetensors");
  Golden tg(p.target_dir + "/golden.safetensors");
  const auto prompt = g.i32("prompt_ids");
  const int32_t n = static_cast<int32_t>(prompt.size());
  const auto& aux = p.draft->target_aux_indices();
  ForwardOut out = test::run_forward(*p.target, prompt, LogitsMode::kLast, &aux);
  p.draft->append_context(0, out.aux.data(), n, 0);
  const BlockOut c1 = run_block(p, g.i32("block_ids"), n);
  EXPECT_EQ(c1.ids, g.i32("draft_ids"));
  EXPECT_LE(max_abs_diff(c1.logits, g.f32("block_logits")), 5 * kTol);
  const int32_t a2 = g.scalar_i32("cycle2_accepted");
  const auto greedy = tg.i32("greedy_ids");
  std::vector<int32_t> acc(greedy.begin(), greedy.begin() + a2 + 1);
  ForwardOut o2 = test::run_forward(*p.target, acc, LogitsMode::kNone, &aux);
  p.draft->append_context(0, o2.aux.data(), a2 + 1, n);
  const BlockOut c2 = run_block(p, g.i32("cycle2_block_ids"), n + a2 + 1);
  EXPECT_EQ(c2.ids, g.i32("cycle2_draft_ids"));
  EXPECT_LE(max_abs_diff(c2.logits, g.f32("cycle2_block_logits")), 5 * kTol);
}

// Context fed in small pieces (as the engine does cycle by cycle) equals one big append, a
// draft block leaves no trace (running it twice gives the same bits), and a small block
// budget (ring slack) still reproduces the golden.
TEST_P(DFlashGolden, ChunkedContextAndRepeatedBlocks) {
  LoadOptions opts;
  opts.max_block = 2;  // slack = max(max_block, block_size) → the drafter's own B
  Pair p(GetParam(), opts);
  Golden g(p.dir + "/golden.safetensors");
  const int32_t n = static_cast<int32_t>(g.i32("prompt_ids").size());
  const auto taps = g.f32("taps");
  const size_t row = taps.size() / n;
  for (int32_t p0 = 0; p0 < n;) {
    const int32_t m = std::min(3, n - p0);
    p.draft->append_context(0, taps.data() + p0 * row, m, p0);
    p0 += m;
  }
  const auto block = g.i32("block_ids");
  const BlockOut a = run_block(p, block, n);
  const BlockOut b = run_block(p, block, n);
  EXPECT_EQ(0, std::memcmp(a.hidden.data(), b.hidden.data(), a.hidden.size() * sizeof(float)));
  EXPECT_LE(max_abs_diff(a.hidden, g.f32("block_hidden")), kTol);
  // A shorter block (fewer drafts) is a different computation but must not disturb the cache.
  std::vector<int32_t> shorter(block.begin(), block.begin() + 3);
  run_block(p, shorter, n);
  const BlockOut c = run_block(p, block, n);
  EXPECT_EQ(0, std::memcmp(a.hidden.data(), c.hidden.data(), a.hidden.size() * sizeof(float)));
  // Cycle 2 on top of the chunked cache.
  const int32_t a2 = g.scalar_i32("cycle2_accepted");
  const auto new_taps = g.f32("cycle2_new_ctx_taps");
  p.draft->append_context(0, new_taps.data(), a2 + 1, n);
  const BlockOut c2 = run_block(p, g.i32("cycle2_block_ids"), n + a2 + 1);
  EXPECT_LE(max_abs_diff(c2.hidden, g.f32("cycle2_block_hidden")), kTol);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DFlashGolden,
                         ::testing::Values("zlab_full", "mimo_style", "mixed_swa", "dflash2_noncausal",
                                           "gemma4_mixed"));

// MiMo: the mask embedding sidecar is loaded and used, and the value scale / backbone base
// are applied (the golden without them is far away from ours).
TEST(DFlashMiMo, FeaturesAreApplied) {
  Pair p("mimo_style");
  EXPECT_TRUE(p.draft->has_mask_embedding());
  EXPECT_NE(p.draft->mask_embedding_path().find("mask_embedding.pt"), std::string::npos);
  EXPECT_FLOAT_EQ(p.draft->dflash().attention_value_scale, 0.612f);
  for (const auto& l : p.draft->config().layers) {
    EXPECT_TRUE(l.sinks);
    EXPECT_EQ(l.rope.n_rot, 8);
  }
  Golden g(p.dir + "/golden.safetensors");
  const int32_t n = static_cast<int32_t>(g.i32("prompt_ids").size());
  const auto taps = g.f32("taps");
  p.draft->append_context(0, taps.data(), n, 0);
  const BlockOut o = run_block(p, g.i32("block_ids"), n);
  const auto want = g.f32("block_hidden");
  EXPECT_LE(max_abs_diff(o.hidden, want), kTol);
  for (const char* alt : {"alt_no_value_scale_block_hidden", "alt_no_backbone_base_block_hidden",
                          "alt_neither_block_hidden"}) {
    const auto a = g.f32(alt);
    const double gap = max_abs_diff(a, want);
    EXPECT_GT(gap, 100 * kTol) << alt << ": the golden variant barely differs";
    EXPECT_GT(max_abs_diff(o.hidden, a), 50 * kTol) << alt;
    std::printf("[mimo_style] |golden − %s| = %.3g, |ours − %s| = %.3g\n", alt, gap, alt,
                max_abs_diff(o.hidden, a));
  }
}

// Without the sidecar the MASK rows embed through the target table — a different (and, for
// MiMo, wrong) result; the drafter must not silently do that when the file is present.
TEST(DFlashMiMo, MaskEmbeddingChangesTheOutput) {
  test::TempDir tmp("mimo_nomask");
  const std::string src = test::fixture("dflash/mimo_style/draft");
  test::copy_folder(src, tmp.str());
  std::filesystem::remove(tmp.file("mask_embedding.pt"));
  Pair p("mimo_style");
  DFlashDraftModel bare(tmp.str(), *p.target, LoadOptions{}, *p.pool);
  EXPECT_FALSE(bare.has_mask_embedding());
  Golden g(p.dir + "/golden.safetensors");
  const int32_t n = static_cast<int32_t>(g.i32("prompt_ids").size());
  const auto taps = g.f32("taps");
  const auto block = g.i32("block_ids");
  bare.append_context(0, taps.data(), n, 0);
  std::vector<float> h(block.size() * 64), l((block.size() - 1) * 512);
  bare.draft_block(0, block.data(), int32_t(block.size()), n, *p.target, l.data(), h.data());
  EXPECT_GT(max_abs_diff(h, g.f32("block_hidden")), 1e-2);
}

std::string drafter_error(const std::string& draft_dir, const std::string& target_dir) {
  auto pool = test::make_pool(1);
  auto target = load_causal_lm(target_dir, LoadOptions{}, *pool);
  try {
    DFlashDraftModel d(draft_dir, *target, LoadOptions{}, *pool);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(DFlashLoad, MismatchedTargetIsRefused) {
  // mimo_style taps layer 2; tied_gqa2 has 2 layers.
  std::string e = drafter_error(test::fixture("dflash/mimo_style/draft"), test::fixture("qwen3/tied_gqa2"));
  EXPECT_NE(e.find("target_layer_ids"), std::string::npos) << e;
  // default/draft has hidden 128, qwen3/sharded 64.
  e = drafter_error(test::fixture("default/draft"), test::fixture("qwen3/sharded"));
  EXPECT_NE(e.find("hidden"), std::string::npos) << e;
  // A target folder is not a drafter.
  e = drafter_error(test::fixture("qwen3/sharded"), test::fixture("qwen3/sharded"));
  EXPECT_NE(e, "");
  // The genuine pairs load.
  EXPECT_EQ(drafter_error(test::fixture("dflash/zlab_full/draft"), test::fixture("qwen3/sharded")), "");
  EXPECT_EQ(drafter_error(test::fixture("default/draft"), test::fixture("default/target")), "");
}

// fc input width ≠ taps × target hidden: a config claiming one tap over a 2-tap fc.
TEST(DFlashLoad, WrongFcWidthIsRefused) {
  test::TempDir tmp("fcwidth");
  test::copy_folder(test::fixture("dflash/zlab_full/draft"), tmp.str());
  auto cfg = test::read_json(tmp.file("config.json"));
  cfg["dflash_config"]["target_layer_ids"] = {1};
  test::write_text(tmp.file("config.json"), cfg.dump(2));
  const std::string e = drafter_error(tmp.str(), test::fixture("qwen3/sharded"));
  EXPECT_NE(e.find("fc"), std::string::npos) << e;
  EXPECT_NE(e.find("128"), std::string::npos) << e;
}

// The gemma-4 drafter drafts through the target's head: its final_logit_softcapping must be the
// target's (30); a different cap, or a target without one, is refused; no key = the target's.
TEST(DFlashLoad, Gemma4DrafterSoftcapMustMatchTheTarget) {
  EXPECT_EQ(drafter_error(test::fixture("dflash/gemma4_mixed/draft"), test::fixture("gemma4/dense_v5")), "");
  test::TempDir tmp("softcap");
  test::copy_folder(test::fixture("dflash/gemma4_mixed/draft"), tmp.str());
  auto cfg = test::read_json(tmp.file("config.json"));
  cfg["final_logit_softcapping"] = 20.0;
  test::write_text(tmp.file("config.json"), cfg.dump(2));
  const std::string e = drafter_error(tmp.str(), test::fixture("gemma4/dense_v5"));
  EXPECT_NE(e.find("final_logit_softcapping"), std::string::npos) << e;
  cfg.erase("final_logit_softcapping");
  test::write_text(tmp.file("config.json"), cfg.dump(2));
  EXPECT_EQ(drafter_error(tmp.str(), test::fixture("gemma4/dense_v5")), "");
}

TEST(DFlashLoad, MissingAndExtraTensorsAreNamed) {
  test::TempDir tmp("draft_tensors");
  test::copy_folder(test::fixture("dflash/zlab_full/draft"), tmp.str());
  auto t = test::read_st(tmp.file("model.safetensors"));
  auto broken = t;
  broken.erase("layers.1.self_attn.k_norm.weight");
  test::write_st(tmp.file("model.safetensors"), broken);
  std::string e = drafter_error(tmp.str(), test::fixture("qwen3/sharded"));
  EXPECT_NE(e.find("layers.1.self_attn.k_norm.weight"), std::string::npos) << e;
  broken = t;
  broken["mask_hidden"] = test::StTensor{"F32", {64}, std::string(256, '\0')};
  test::write_st(tmp.file("model.safetensors"), broken);
  e = drafter_error(tmp.str(), test::fixture("qwen3/sharded"));
  EXPECT_NE(e.find("mask_hidden"), std::string::npos) << e;
}

TEST(DFlashDraft, PositionsMustFollowTheCache) {
  Pair p("zlab_full");
  Golden g(p.dir + "/golden.safetensors");
  const int32_t n = static_cast<int32_t>(g.i32("prompt_ids").size());
  const auto taps = g.f32("taps");
  EXPECT_THROW(p.draft->append_context(0, taps.data(), n, 3), Error);
  p.draft->append_context(0, taps.data(), n, 0);
  auto block = g.i32("block_ids");
  std::vector<float> l(7 * 512);
  EXPECT_THROW(p.draft->draft_block(0, block.data(), 8, n + 1, *p.target, l.data()), Error);
  EXPECT_THROW(p.draft->draft_block(0, block.data(), 1, n, *p.target, l.data()), Error);
}

}  // namespace
}  // namespace dfl
