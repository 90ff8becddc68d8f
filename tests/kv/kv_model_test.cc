// Rollback at the model level: a target forward over a speculative block, truncated back to the
// accepted length, then continued, gives logits bit-identical to a run that never saw the block.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/golden.h"
#include "common/models.h"
#include "model/model.h"

namespace dfl {
namespace {

TEST(KvModelRollback, TruncatedBlockIsInvisibleBitwise) {
  for (const char* name : {"sharded", "gqa4_yarn"}) {
    const std::string dir = test::fixture(std::string("qwen3/") + name);
    test::Golden g(dir + "/golden.safetensors");
    auto pool = test::make_pool();
    auto model = load_causal_lm(dir, LoadOptions{}, *pool);
    const int32_t V = model->config().vocab_size;
    const auto prompt = g.i32("prompt_ids");
    const int32_t n = static_cast<int32_t>(prompt.size());
    const auto cont = g.i32("greedy_ids");  // a real continuation
    constexpr int B = 8, kAfter = 4;

    // Reference: prompt, then the continuation one token at a time.
    std::vector<std::vector<float>> ref;
    test::run_forward(*model, prompt, LogitsMode::kNone);
    for (int i = 0; i < B + kAfter; ++i) ref.push_back(test::run_forward(*model, {cont[i]}, LogitsMode::kLast).logits);

    std::mt19937 rng(7);
    for (int a = 0; a <= B; ++a) {
      model->kv().clear(0);
      test::run_forward(*model, prompt, LogitsMode::kNone);
      // Block: the first a tokens are the true continuation, the rest junk.
      std::vector<int32_t> block(cont.begin(), cont.begin() + a);
      while (int(block.size()) < B) block.push_back(int32_t(rng() % V));
      ForwardOut bo = test::run_forward(*model, block, LogitsMode::kAll);
      for (int j = 0; j < a; ++j)
        EXPECT_EQ(0, std::memcmp(bo.logits.data() + size_t(j) * V, ref[j].data(), sizeof(float) * V))
            << name << " a=" << a << " block row " << j << " differs from decoding it alone";
      model->kv().truncate(0, n + a);
      ASSERT_EQ(model->kv().length(0), n + a);
      // Continue with the true tokens, both batched and one by one.
      std::vector<int32_t> next(cont.begin() + a, cont.begin() + a + kAfter);
      ForwardOut co = test::run_forward(*model, next, LogitsMode::kAll);
      for (int j = 0; j < kAfter; ++j)
        EXPECT_EQ(0, std::memcmp(co.logits.data() + size_t(j) * V, ref[a + j].data(), sizeof(float) * V))
            << name << " a=" << a << " continued row " << j;
    }
  }
}

// Two sequences side by side do not see each other.
TEST(KvModelRollback, SequencesAreIndependent) {
  const std::string dir = test::fixture("qwen3/tied_gqa2");
  test::Golden g(dir + "/golden.safetensors");
  auto pool = test::make_pool();
  LoadOptions opts;
  opts.n_seqs = 2;
  auto model = load_causal_lm(dir, opts, *pool);
  const int32_t V = model->config().vocab_size;
  const auto prompt = g.i32("prompt_ids");
  ForwardOut a = test::run_forward(*model, prompt, LogitsMode::kLast, nullptr, 0);
  test::run_forward(*model, {5, 6, 7, 8, 9, 10, 11}, LogitsMode::kLast, nullptr, 1);
  model->kv().clear(0);
  ForwardOut b = test::run_forward(*model, prompt, LogitsMode::kLast, nullptr, 0);
  EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), sizeof(float) * V));
  EXPECT_EQ(model->kv().length(1), 7);
}

}  // namespace
}  // namespace dfl
