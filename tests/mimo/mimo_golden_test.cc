// MiMo-V2-Flash (split q/k/v) and MiMo-V2.5 (fused qkv) tiny FP8 checkpoints against goldens from
// transformers' in-library MiMoV2FlashForCausalLM (tools/ref/make_mimo_fixtures.py): embedding,
// every layer's residual stream, prompt logits, greedy continuation (incremental decode through
// the sliding rings), the SGLang W+1 window edge, Eagle3/DFlash taps and the MiMo-style drafter.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "common/golden.h"
#include "common/models.h"
#include "model/dflash_draft.h"
#include "model/model.h"

namespace dfl {
namespace {

// fp32 engine vs fp32 HF with identical (dequantized) weights: only summation order differs.
constexpr double kLayerTol = 1e-4;
constexpr double kLogitTol = 2e-4;

struct Fixture {
  std::string name;
  std::string dir() const { return test::fixture("mimo/" + name); }
};
const Fixture kFixtures[] = {{"flash_split"}, {"v25_fused"}};

class MiMoGolden : public ::testing::TestWithParam<Fixture> {};

TEST_P(MiMoGolden, PrefillLayersAndLogits) {
  const Fixture& f = GetParam();
  test::Golden g(f.dir() + "/golden.safetensors");
  auto pool = test::make_pool();
  auto m = load_causal_lm(f.dir(), LoadOptions{}, *pool);
  const ModelConfig& c = m->config();
  const int32_t H = c.hidden_size, V = c.vocab_size, L = c.n_layers;
  const auto prompt = g.i32("prompt_ids");
  const int32_t n = int32_t(prompt.size());
  std::vector<int32_t> aux;
  for (int32_t i = 0; i <= L; ++i) aux.push_back(i);
  const ForwardOut out = test::run_forward(*m, prompt, LogitsMode::kAll, &aux);
  // aux 0 = embedding (exact: bf16 table rows)
  const auto emb = g.f32("embed");
  const auto lo = g.f32("layer_out");
  double emb_err = 0, layer_err = 0;
  for (int32_t t = 0; t < n; ++t) {
    const float* row = out.aux.data() + size_t(t) * (L + 1) * H;
    emb_err = std::max(emb_err, test::max_abs_diff(row, emb.data() + size_t(t) * H, H));
    for (int32_t il = 0; il < L; ++il)
      layer_err = std::max(layer_err, test::max_abs_diff(row + size_t(il + 1) * H,
                                                         lo.data() + (size_t(il) * n + t) * H, H));
  }
  const auto full = g.f32("full_logits");
  const double logit_err = test::max_abs_diff(out.logits.data(), full.data(), size_t(n) * V);
  std::printf("[mimo] %s prefill: embed err %.2e, layer_out err %.2e, logits err %.2e (tol %.0e)\n",
              f.name.c_str(), emb_err, layer_err, logit_err, kLogitTol);
  EXPECT_EQ(emb_err, 0.0);
  EXPECT_LT(layer_err, kLayerTol);
  EXPECT_LT(logit_err, kLogitTol);
  EXPECT_EQ(test::argmax_rows(out.logits.data(), n, V),
            test::argmax_rows(full.data(), n, V));
}

TEST_P(MiMoGolden, GreedyIncrementalDecode) {
  const Fixture& f = GetParam();
  test::Golden g(f.dir() + "/golden.safetensors");
  const auto prompt = g.i32("prompt_ids");
  const auto want = g.i32("greedy_ids");
  const auto full = g.f32("full_logits");
  const int32_t n = int32_t(prompt.size());
  // max_block 4: the prompt is prefilled in chunks of 4 through rings of window + 4 slots.
  for (int32_t block : {16, 4}) {
    auto pool = test::make_pool();
    LoadOptions o;
    o.max_block = block;
    auto m = load_causal_lm(f.dir(), o, *pool);
    const int32_t V = m->config().vocab_size;
    ForwardOut out = test::run_forward(*m, prompt, LogitsMode::kLast);
    std::vector<int32_t> got;
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err = std::max(err, test::max_abs_diff(out.logits.data(), full.data() + (size_t(n) - 1 + i) * V, V));
      got.push_back(int32_t(ops::argmax(out.logits.data(), V)));
      out = test::run_forward(*m, {got.back()}, LogitsMode::kLast);
    }
    std::printf("[mimo] %s greedy (max_block %d): %zu/%zu tokens match, max logit err %.2e\n",
                f.name.c_str(), block, size_t(std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin()),
                want.size(), err);
    EXPECT_EQ(got, want);
    EXPECT_LT(err, kLogitTol);
  }
}

INSTANTIATE_TEST_SUITE_P(All, MiMoGolden, ::testing::ValuesIn(kFixtures),
                         [](const auto& i) { return i.param.name; });

// SGLang's reading of the window (W+1 keys) as a config-level choice, against HF run with
// sliding_window = W+1.
TEST(MiMoGolden, WindowEdgePlusOne) {
  const std::string dir = test::fixture("mimo/flash_split");
  test::Golden g(dir + "/golden.safetensors");
  const auto ids = g.i32("full_ids");
  const int32_t n = int32_t(g.i32("prompt_ids").size());
  const auto want = g.f32("window_plus1_logits_from_n_minus_1");
  const auto base = g.f32("full_logits");
  auto pool = test::make_pool();
  LoadOptions lo;
  lo.config.window_edge = WindowEdge::kInclusiveWPlus1;  // the --window-edge w+1 option
  std::unique_ptr<CausalLM> m = load_causal_lm(dir, lo, *pool);
  const ModelConfig& c = m->config();
  for (const auto& l : c.layers)
    if (l.attn == AttnKind::kSliding) EXPECT_EQ(l.window, (Window{c.mimo->sliding_window, 0}));
  const ForwardOut out = test::run_forward(*m, ids, LogitsMode::kAll);
  const int32_t V = c.vocab_size;
  const size_t rows = ids.size() - (n - 1);
  const double err = test::max_abs_diff(out.logits.data() + size_t(n - 1) * V, want.data(), rows * V);
  const double vs_default = test::max_abs_diff(out.logits.data() + size_t(n - 1) * V,
                                               base.data() + size_t(n - 1) * V, rows * V);
  std::printf("[mimo] window edge W+1: err %.2e vs HF(sliding_window=W+1); differs from W by %.2f\n",
              err, vs_default);
  EXPECT_LT(err, kLogitTol);
  EXPECT_GT(vs_default, 1e-2);
}

// Eagle3 / DFlash taps on MiMo: aux 0 = embedding output; aux t+1 = residual stream after layer t,
// pre-final-norm also for the LAST layer; then the MiMo-style drafter's first block.
TEST(MiMoGolden, TapsAndDrafterBlock) {
  const std::string tdir = test::fixture("mimo/flash_split");
  const std::string fdir = test::fixture("mimo/dflash");
  test::Golden g(fdir + "/golden.safetensors");
  auto pool = test::make_pool();
  auto target = load_causal_lm(tdir, LoadOptions{}, *pool);
  DFlashDraftModel d(fdir + "/draft", *target, LoadOptions{}, *pool);
  const int32_t H = target->config().hidden_size, V = target->config().vocab_size;
  const auto ids = g.i32("prompt_ids");
  const int32_t n = int32_t(ids.size());
  std::vector<int32_t> aux = d.target_aux_indices();
  ASSERT_EQ(aux, (std::vector<int32_t>{1, 3, 5}));
  ASSERT_EQ(aux.back(), target->config().n_layers);  // the last layer
  aux.insert(aux.begin(), 0);
  const ForwardOut out = test::run_forward(*target, ids, LogitsMode::kLast, &aux);
  const auto taps = g.f32("taps");
  const auto emb = g.f32("embed_aux0");
  std::vector<float> got_taps(size_t(n) * 3 * H);
  double emb_err = 0;
  for (int32_t t = 0; t < n; ++t) {
    emb_err = std::max(emb_err, test::max_abs_diff(out.aux.data() + size_t(t) * 4 * H, emb.data() + size_t(t) * H, H));
    std::copy_n(out.aux.data() + (size_t(t) * 4 + 1) * H, 3 * H, got_taps.data() + size_t(t) * 3 * H);
  }
  const double tap_err = test::max_abs_diff(got_taps, taps);
  EXPECT_EQ(emb_err, 0.0);
  EXPECT_LT(tap_err, kLayerTol);
  // The drafter fed with the engine's own taps.
  d.append_context(0, got_taps.data(), n, 0);
  const auto block = g.i32("block_ids");
  std::vector<float> logits(size_t(block.size() - 1) * V);
  d.draft_block(0, block.data(), int32_t(block.size()), n, *target, logits.data());
  const auto want = g.f32("block_logits");
  const double err = test::max_abs_diff(logits, want);
  std::printf("[mimo] taps err %.2e; drafter block logits err %.2e\n", tap_err, err);
  EXPECT_LT(err, 5e-4);
  EXPECT_EQ(test::argmax_rows(logits.data(), int64_t(block.size()) - 1, V), g.i32("draft_ids"));
}

}  // namespace
}  // namespace dfl
