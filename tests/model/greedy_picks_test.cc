// SegmentSpec::argmax_only (the greedy picks the engine asks for when a request is greedy and
// wants no logprobs): in a batch mixing pick segments (kLast, kAll) with logits segments, every
// pick equals ops::argmax of that row's logits from the same batch run with logits everywhere.
// On GGUF heads the screen applies to (Q8_0 tied embeddings of the llama.cpp-converted dialect
// fixtures; the real Gemma-3-270M's Q8_0 head when it is cached), on a soft-capped head (Gemma 4,
// which picks through its logits) and on an fp32 head (the logits path).
#include <gtest/gtest.h>

#include <cstring>

#include "common/golden.h"
#include "common/models.h"
#include "core/mmap.h"
#include "engine/gguf_tokenizer.h"
#include "io/gguf.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace dfl {
namespace {

// Three sequences: a prefill chunk (last row), a verify block (all rows), and a third segment
// (all rows) that keeps its logits in the pick run.
void check_picks(const std::string& path, const std::vector<int32_t>& text) {
  auto pool = test::make_pool();
  LoadOptions lo;
  lo.n_seqs = 3;
  auto model = load_causal_lm(path, lo, *pool);
  const int32_t V = model->config().vocab_size;
  const int32_t n0 = 12, n1 = 16, n2 = 9;  // n0 ≤ the ring slack of sliding layers
  ASSERT_GE(int32_t(text.size()), n0 + n1);
  auto batch = [&](bool picks) {
    ForwardBatch b;
    b.segs.push_back({0, text.data(), n0, 0, LogitsMode::kLast, false, picks});
    b.segs.push_back({1, text.data() + n0, n1, 0, LogitsMode::kAll, false, picks});
    b.segs.push_back({2, text.data() + 3, n2, 0, LogitsMode::kAll, false, false});
    return b;
  };
  BatchOut with_logits, with_picks;
  model->forward(batch(false), with_logits);
  for (int s = 0; s < 3; ++s) model->kv().clear(s);
  model->forward(batch(true), with_picks);
  ASSERT_EQ(with_picks.argmax.size(), size_t(1 + n1));
  ASSERT_EQ(with_picks.logits.size(), size_t(n2) * V);  // only the third segment's rows
  const auto want0 = test::argmax_rows(with_logits.logits_of(0, V), 1, V);
  const auto want1 = test::argmax_rows(with_logits.logits_of(1, V), n1, V);
  EXPECT_EQ(with_picks.argmax_of(0)[0], want0[0]) << path;
  for (int32_t j = 0; j < n1; ++j) EXPECT_EQ(with_picks.argmax_of(1)[j], want1[j]) << path << " row " << j;
  EXPECT_EQ(0, std::memcmp(with_picks.logits_of(2, V), with_logits.logits_of(2, V), size_t(n2) * V * 4))
      << "a logits segment beside pick segments keeps its bits";
}

std::vector<int32_t> ids(int32_t n, int32_t V) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = (i * 37 + 11) % V;
  return t;
}

TEST(GreedyPicks, EqualTheLogitsArgmaxOnQ8_0Heads) {
  for (const char* f : {"gguf_dialects/qwen3_tied_gqa2.q8_0.gguf", "gguf_dialects/qwen3_untied_gqa1.q8_0.gguf"}) {
    const ops::ArgmaxStats before = ops::argmax_stats();
    check_picks(test::fixture(f), ids(40, 256));
    EXPECT_GT(ops::argmax_stats().screened_rows + ops::argmax_stats().full_rows,
              before.screened_rows + before.full_rows)
        << f << ": the screen must have run";
  }
}

TEST(GreedyPicks, EqualTheLogitsArgmaxOnSoftCappedAndFp32Heads) {
  check_picks(test::fixture("gemma4/gguf/dense_quant/model.gguf"), ids(40, 200));
  check_picks(test::fixture("gguf_dialects/qwen3_untied_gqa1.f32.gguf"), ids(40, 256));
}

TEST(GreedyPicks, EqualTheLogitsArgmaxOnTheRealGemma3) {
  if (!file_exists(test::real_gemma3_path()))
    GTEST_SKIP() << "real model absent: run tools/models/gemma3_270m.sh";
  const std::vector<int32_t> t = gguf_tokenizer(GgufFile(test::real_gemma3_path()))
      .encode("The river runs through the middle of the old town, and most of the houses along "
              "its banks were built by the families who worked the mills upstream. In the spring the "
              "water rises quickly, so the lower streets have stone walls and heavy gates.");
  const ops::ArgmaxStats before = ops::argmax_stats();
  check_picks(test::real_gemma3_path(), t);
  const ops::ArgmaxStats after = ops::argmax_stats();
  EXPECT_EQ(after.screened_rows - before.screened_rows + after.full_rows - before.full_rows, 17u);
}

}  // namespace
}  // namespace dfl
