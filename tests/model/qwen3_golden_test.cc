// Qwen3 target vs the transformers goldens (docs/FIXTURES.md, tests/fixtures/qwen3/<name>).
//
// Tolerances: `embed` is a row copy of the fp32 table → exact. `layer_out` / `logits` / the
// greedy-step logits: max |ours − HF| ≤ 1e-4 absolute (values are O(1–10); HF computes in fp32
// with a different summation order, so we expect ~1e-6..1e-5). `greedy_ids` exact.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdio>

#include "common/decoder_golden.h"
#include "common/golden.h"
#include "common/models.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace dfl {
namespace {

using test::Golden;
using test::max_abs_diff;

constexpr double kTol = 1e-4;

class Qwen3Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3Golden, PromptForwardMatchesTransformers) {
  test::expect_matches_golden(test::fixture("qwen3/" + GetParam()), "qwen3/" + GetParam());
}

// The batched forward over prompt + greedy[:-1] predicts the same tokens, and its rows are
// bit-identical to the incremental (cached) decode: the lossless claim of the engine rests on
// batch invariance of the whole forward.
// fp32 attention everywhere (the bf16 prefill attention of long runs off, see ops.h): a batch of
// rows equals the same rows computed one token at a time, bit for bit.
TEST_P(Qwen3Golden, BatchedEqualsIncrementalBitwise) {
  struct Fp32Attention {
    Fp32Attention() { set_prefill_attention(false); }
    ~Fp32Attention() { set_prefill_attention(true); }
  } fp32_attention;
  const std::string dir = test::fixture("qwen3/" + GetParam());
  Golden g(dir + "/golden.safetensors");
  auto pool = test::make_pool();
  auto model = load_causal_lm(dir, LoadOptions{}, *pool);
  const int32_t V = model->config().vocab_size;
  auto seq = g.i32("prompt_ids");
  const int32_t n = static_cast<int32_t>(seq.size());
  const auto greedy = g.i32("greedy_ids");
  seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
  ForwardOut all = test::run_forward(*model, seq, LogitsMode::kAll);
  const auto picks = test::argmax_rows(all.logits.data() + size_t(n - 1) * V, greedy.size(), V);
  EXPECT_EQ(picks, greedy);

  model->kv().clear(0);
  // Incremental: prompt, then one token at a time.
  std::vector<int32_t> prompt(seq.begin(), seq.begin() + n);
  ForwardOut pre = test::run_forward(*model, prompt, LogitsMode::kAll);
  EXPECT_EQ(0, std::memcmp(pre.logits.data(), all.logits.data(), sizeof(float) * size_t(n) * V))
      << "prompt rows of a longer batch differ from the prompt alone";
  for (size_t p = n; p < seq.size(); ++p) {
    ForwardOut step = test::run_forward(*model, {seq[p]}, LogitsMode::kLast);
    ASSERT_EQ(0, std::memcmp(step.logits.data(), all.logits.data() + p * V, sizeof(float) * V))
        << "position " << p;
  }
}

// The default path: a run of >= kPrefillAttentionMinQueries rows takes the prefill attention
// (ops.h): bf16 products on AVX-512 machines (AMX tiles, or AVX-512 BF16 dot products), fp32
// query × key tiles on AVX2 ones; each level this machine has is run (the model loaded under its
// cap). Its logits stay within bf16 rounding of the per-row fp32 ones (AVX2: within 1e-4 of
// them) and the greedy picks are unchanged. (gqa4_yarn: the fixture whose prompt + continuation
// is that long.)
TEST(Qwen3GoldenPrefill, PrefillAttentionCloseToFp32) {
  const std::string name = "gqa4_yarn";
  const std::string dir = test::fixture("qwen3/" + name);
  Golden g(dir + "/golden.safetensors");
  auto pool = test::make_pool();
  auto seq = g.i32("prompt_ids");
  const auto greedy = g.i32("greedy_ids");
  seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
  ASSERT_GE(static_cast<int64_t>(seq.size()), kPrefillAttentionMinQueries);
  int levels = 0;
  for (IsaLevel isa : {IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    set_cpu_isa_limit(isa);
    if (cpu_isa() != isa || !uses_prefill_attention(static_cast<int64_t>(seq.size()))) continue;
    ++levels;
    auto model = load_causal_lm(dir, LoadOptions{}, *pool);
    const int32_t V = model->config().vocab_size;
    ForwardOut fast = test::run_forward(*model, seq, LogitsMode::kAll);
    model->kv().clear(0);
    set_prefill_attention(false);
    ForwardOut exact = test::run_forward(*model, seq, LogitsMode::kAll);
    set_prefill_attention(true);
    float scale = 0;
    for (float x : exact.logits) scale = std::max(scale, std::fabs(x));
    const double err = test::max_abs_diff(fast.logits.data(), exact.logits.data(), exact.logits.size());
    std::printf("%s (%s): prefill attention, max |logit diff| %.3g (max |logit| %.3g)\n", name.c_str(),
                isa_name(isa), err, scale);
    EXPECT_LT(err, (isa == IsaLevel::kAvx2 ? 1e-4 : 2e-2) * scale) << isa_name(isa);
    const size_t n = seq.size() - greedy.size() + 1;
    EXPECT_EQ(test::argmax_rows(fast.logits.data() + (n - 1) * V, greedy.size(), V), greedy) << isa_name(isa);
  }
  set_cpu_isa_limit(IsaLevel::kAvx512);
  if (levels == 0) GTEST_SKIP() << "no AVX2 on this machine: the per-row fp32 path is the only one";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen3Golden,
                         ::testing::Values("tied_gqa2", "untied_gqa1", "gqa4_yarn", "sharded"));

// kLast gives the last row of kAll; kNone gives no logits but still fills the cache.
TEST(Qwen3Model, LogitsModes) {
  const std::string dir = test::fixture("qwen3/tied_gqa2");
  Golden g(dir + "/golden.safetensors");
  auto pool = test::make_pool();
  auto model = load_causal_lm(dir, LoadOptions{}, *pool);
  const int32_t V = model->config().vocab_size;
  const auto prompt = g.i32("prompt_ids");
  const int32_t n = static_cast<int32_t>(prompt.size());
  ForwardOut last = test::run_forward(*model, prompt, LogitsMode::kLast);
  ASSERT_EQ(last.logits.size(), size_t(V));
  EXPECT_LE(max_abs_diff(last.logits.data(), g.f32("logits").data() + size_t(n - 1) * V, V), kTol);
  model->kv().clear(0);
  ForwardOut none = test::run_forward(*model, prompt, LogitsMode::kNone);
  EXPECT_TRUE(none.logits.empty());
  EXPECT_EQ(model->kv().length(0), n);
  // The cache filled by the kNone pass serves the next step like any other.
  ForwardOut step = test::run_forward(*model, {g.i32("greedy_ids")[0]}, LogitsMode::kLast);
  EXPECT_LE(max_abs_diff(step.logits.data(), g.f32("greedy_logits").data() + V, V), kTol);
}

// Aux columns come back in the requested order, duplicates allowed.
TEST(Qwen3Model, AuxOrderAndDuplicates) {
  const std::string dir = test::fixture("qwen3/sharded");
  Golden g(dir + "/golden.safetensors");
  auto pool = test::make_pool();
  auto model = load_causal_lm(dir, LoadOptions{}, *pool);
  const int32_t H = model->config().hidden_size;
  const auto prompt = g.i32("prompt_ids");
  const int32_t n = static_cast<int32_t>(prompt.size());
  const std::vector<int32_t> aux = {3, 0, 1, 3};
  ForwardOut out = test::run_forward(*model, prompt, LogitsMode::kNone, &aux);
  ASSERT_EQ(out.aux.size(), size_t(n) * 4 * H);
  const auto embed = g.f32("embed");
  const auto lo = g.f32("layer_out");
  for (int32_t t = 0; t < n; ++t) {
    const float* row = out.aux.data() + size_t(t) * 4 * H;
    EXPECT_LE(max_abs_diff(row, lo.data() + (size_t(2) * n + t) * H, H), kTol);
    EXPECT_LE(max_abs_diff(row + H, embed.data() + size_t(t) * H, H), 0.0);
    EXPECT_LE(max_abs_diff(row + 2 * H, lo.data() + size_t(t) * H, H), kTol);
    EXPECT_EQ(0, std::memcmp(row, row + 3 * H, sizeof(float) * H));
  }
}

TEST(Qwen3Model, AuxIndexOutOfRangeIsAnError) {
  const std::string dir = test::fixture("qwen3/tied_gqa2");
  auto pool = test::make_pool();
  auto model = load_causal_lm(dir, LoadOptions{}, *pool);
  const int32_t L = model->config().n_layers;
  for (int32_t bad : {L + 1, -1, 100}) {
    const std::vector<int32_t> aux = {0, bad};
    model->kv().clear(0);
    try {
      test::run_forward(*model, {1, 2, 3}, LogitsMode::kLast, &aux);
      ADD_FAILURE() << "aux index " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("aux"), std::string::npos) << e.what();
    }
  }
  // L itself (output of the last layer, pre-norm) is valid.
  model->kv().clear(0);
  const std::vector<int32_t> ok = {L};
  EXPECT_NO_THROW(test::run_forward(*model, {1, 2, 3}, LogitsMode::kLast, &ok));
}

TEST(Qwen3Model, ForwardRejectsBadPositionsTokensAndOverflow) {
  const std::string dir = test::fixture("qwen3/tied_gqa2");
  auto pool = test::make_pool();
  LoadOptions opts;
  opts.max_context = 8;
  auto model = load_causal_lm(dir, opts, *pool);
  EXPECT_EQ(model->kv().max_context(), 8);
  test::run_forward(*model, {1, 2, 3}, LogitsMode::kLast);
  ForwardArgs a;
  const int32_t t = 5;
  a.tokens = &t;
  a.n = 1;
  a.pos0 = 1;  // ≠ cached length 3
  ForwardOut out;
  EXPECT_THROW(model->forward(a, out), Error);
  EXPECT_THROW(test::run_forward(*model, {512}, LogitsMode::kLast), Error);  // vocab 512
  EXPECT_THROW(test::run_forward(*model, {-1}, LogitsMode::kLast), Error);
  EXPECT_THROW(test::run_forward(*model, {1, 2, 3, 4, 5, 6}, LogitsMode::kLast), Error);  // 9 > 8
  EXPECT_NO_THROW(test::run_forward(*model, {1, 2, 3, 4, 5}, LogitsMode::kLast));          // 8
}

// Tied: lm_head is the embedding table (logit of token t = normed_x · E[t]); untied: it is not.
TEST(Qwen3Model, TiedVersusUntiedHead) {
  auto pool = test::make_pool();
  for (const char* name : {"tied_gqa2", "untied_gqa1"}) {
    auto model = load_causal_lm(test::fixture(std::string("qwen3/") + name), LoadOptions{}, *pool);
    const ModelConfig& c = model->config();
    const int32_t H = c.hidden_size, V = c.vocab_size;
    std::vector<float> x(H);
    for (int32_t i = 0; i < H; ++i) x[i] = std::sin(0.37f * i + 0.1f);
    std::vector<float> logits(V);
    model->lm_head(x.data(), 1, logits.data());
    const std::vector<int32_t> toks = {0, 7, 300, 511};
    std::vector<float> rows(toks.size() * H);
    model->embed(toks.data(), toks.size(), rows.data());
    double worst = 0.0;
    for (size_t j = 0; j < toks.size(); ++j) {
      double dot = 0.0;
      for (int32_t i = 0; i < H; ++i) dot += double(x[i]) * rows[j * H + i];
      worst = std::max(worst, std::fabs(dot - logits[toks[j]]));
    }
    if (c.tie_word_embeddings)
      EXPECT_LT(worst, 1e-4) << name;
    else
      EXPECT_GT(worst, 1e-2) << name << ": untied lm_head looks like the embedding";
  }
}

}  // namespace
}  // namespace dfl
