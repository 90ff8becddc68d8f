// A DFlash drafter from a llama.cpp-style `dflash` GGUF (tools/ref/make_dflash_gguf_fixture.py:
// the zlab_full fixture drafter re-written by gguf-py with llama.cpp's names and metadata, the
// target layers +1-shifted, the mask id on tokenizer.ggml.mask_token_id) is the same drafter as
// its safetensors original: same parsed config, bit-identical block logits, and the same tokens
// and acceptance through the engine. (The safetensors drafter itself is checked against z-lab's
// `dflash` package in dflash_golden_test.cc.)
#include <gtest/gtest.h>

#include <cstring>

#include "common/golden.h"
#include "common/models.h"
#include "engine/engine.h"
#include "model/dflash_draft.h"

namespace dfl {
namespace {

const std::string kTarget = "qwen3/sharded";

TEST(DFlashGguf, ConfigMatchesTheSafetensorsDrafter) {
  const ModelConfig a = load_model_config(test::fixture("dflash/zlab_full/draft"));
  const ModelConfig b = load_model_config(test::fixture("dflash/zlab_full_gguf/draft.gguf"));
  EXPECT_TRUE(b.gguf);
  EXPECT_EQ(b.family, Family::kDFlashDraft);
  EXPECT_EQ(b.dflash->target_layer_ids, a.dflash->target_layer_ids);  // the +1 undone
  EXPECT_EQ(b.dflash->mask_token_id, a.dflash->mask_token_id);
  EXPECT_EQ(b.dflash->block_size, a.dflash->block_size);
  ASSERT_EQ(b.n_layers, a.n_layers);
  for (int il = 0; il < a.n_layers; ++il) EXPECT_EQ(b.layers[il].window, a.layers[il].window);
}

TEST(DFlashGguf, BlockLogitsBitIdentical) {
  auto pool = test::make_pool();
  auto target = load_causal_lm(test::fixture(kTarget), LoadOptions{}, *pool);
  DFlashDraftModel a(test::fixture("dflash/zlab_full/draft"), *target, LoadOptions{}, *pool);
  DFlashDraftModel b(test::fixture("dflash/zlab_full_gguf/draft.gguf"), *target, LoadOptions{}, *pool);
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 7, 3, 250, 11};
  const ForwardOut fo = test::run_forward(*target, prompt, LogitsMode::kNone, &a.target_aux_indices());
  a.append_context(0, fo.aux.data(), int32_t(prompt.size()), 0);
  b.append_context(0, fo.aux.data(), int32_t(prompt.size()), 0);
  const int32_t B = a.dflash().block_size, V = target->config().vocab_size;
  std::vector<int32_t> block(B, a.dflash().mask_token_id);
  block[0] = 13;
  std::vector<float> la(size_t(B - 1) * V), lb(la.size());
  a.draft_block(0, block.data(), B, int32_t(prompt.size()), *target, la.data());
  b.draft_block(0, block.data(), B, int32_t(prompt.size()), *target, lb.data());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), sizeof(float) * la.size()));
}

// The greedy form of DFlashDraftModel::run (picks instead of logits): for two sequences'
// blocks at once, each pick is the argmax of that row's logits from the logits form.
TEST(DFlashGguf, DraftPicksAreTheLogitsArgmax) {
  auto pool = test::make_pool();
  LoadOptions lo;
  lo.n_seqs = 2;
  auto target = load_causal_lm(test::fixture(kTarget), lo, *pool);
  DFlashDraftModel d(test::fixture("dflash/zlab_full_gguf/draft.gguf"), *target, lo, *pool);
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 7, 3, 250, 11};
  const ForwardOut fo = test::run_forward(*target, prompt, LogitsMode::kNone, &d.target_aux_indices());
  const int32_t B = d.dflash().block_size, V = target->config().vocab_size;
  std::vector<int32_t> b0(size_t(B), d.dflash().mask_token_id), b1(size_t(B - 3), d.dflash().mask_token_id);
  b0[0] = 13;
  b1[0] = 42;
  std::vector<float> logits;
  std::vector<int32_t> picks, want;
  for (int pass = 0; pass < 2; ++pass) {
    for (int s = 0; s < 2; ++s) d.kv().clear(s);
    std::vector<DraftJob> jobs(2);
    jobs[0] = {0, fo.aux.data(), int32_t(prompt.size()), b0.data(), B};
    jobs[1] = {1, fo.aux.data(), 5, b1.data(), B - 3};
    d.run(jobs, *target, logits, nullptr, pass ? &picks : nullptr);
    if (pass) continue;
    ASSERT_EQ(logits.size(), size_t(2 * B - 5) * V);
    want = test::argmax_rows(logits.data(), 2 * B - 5, V);
  }
  EXPECT_TRUE(logits.empty());
  EXPECT_EQ(picks, want);
}

TEST(DFlashGguf, EngineOutputIdenticalToTheSafetensorsDrafter) {
  std::vector<std::vector<int32_t>> out(2);
  std::vector<RequestStats> stats(2);
  int k = 0;
  for (const char* d : {"dflash/zlab_full/draft", "dflash/zlab_full_gguf/draft.gguf"}) {
    EngineOptions eo;
    eo.model_dir = test::fixture(kTarget);
    eo.draft_dir = test::fixture(d);
    eo.threads = 2;
    eo.max_seqs = 1;
    eo.calibrate = false;
    Engine e(eo);
    Request r;
    r.prompt.ids = {5, 17, 42, 99, 7, 3, 250, 11};
    r.max_tokens = 40;
    r.ignore_eos = true;
    r.on_update = [&, k](const RequestUpdate& u) {
      out[k].insert(out[k].end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finished) stats[k] = *u.stats;
    };
    e.submit(std::move(r));
    e.run_until_idle();
    ++k;
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(stats[0].drafted_tokens, stats[1].drafted_tokens);
  EXPECT_EQ(stats[0].accepted_tokens, stats[1].accepted_tokens);
  EXPECT_GT(stats[1].draft_steps, 0);
}

}  // namespace
}  // namespace dfl
