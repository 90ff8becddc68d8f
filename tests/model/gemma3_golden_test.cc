// Gemma 3 text target vs the transformers goldens (tools/ref/make_gemma3_fixtures.py): the
// prompt forward (embedding × sqrt(H), sandwich norms with 1 + w, GeGLU, sliding W = 8 on layers
// 0-4 and full attention on layer 5, query_pre_attn_scalar ≠ head_dim, per-kind RoPE with linear
// scaling, final soft-cap) and 32 cached greedy steps; the config in both the transformers-5 and
// the hub (4.x) layout.
#include <gtest/gtest.h>

#include "common/decoder_golden.h"
#include "common/models.h"
#include "model/model.h"

namespace dfl {
namespace {

class Gemma3Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma3Golden, PromptForwardAndGreedyMatchTransformers) {
  test::expect_matches_golden(test::fixture("gemma3/" + GetParam()), "gemma3/" + GetParam());
}

TEST(Gemma3Config, LayerKindsWindowsScalesAndRopes) {
  for (const char* name : {"sw_v5", "hub_linear"}) {
    const ModelConfig c = load_model_config(test::fixture(std::string("gemma3/") + name));
    EXPECT_EQ(c.family, Family::kGemma3);
    ASSERT_EQ(c.n_layers, 6);
    for (int il = 0; il < 6; ++il) {
      const LayerSpec& l = c.layers[il];
      const bool global = il == 5;
      EXPECT_EQ(l.attn, global ? AttnKind::kFull : AttnKind::kSliding) << name << " " << il;
      EXPECT_EQ(l.window, global ? (Window{-1, 0}) : (Window{7, 0})) << name << " " << il;
      EXPECT_FLOAT_EQ(l.attn_scale, 1.0f / std::sqrt(24.0f));
      EXPECT_FLOAT_EQ(l.rope.theta, global ? 1e6f : 1e4f);
    }
    EXPECT_TRUE(c.norm_plus_one);
    EXPECT_FLOAT_EQ(c.embed_scale, 8.0f);
    EXPECT_TRUE(c.tie_word_embeddings);
  }
  const ModelConfig h = load_model_config(test::fixture("gemma3/hub_linear"));
  EXPECT_EQ(h.layers[5].rope.type, "linear");
  EXPECT_FLOAT_EQ(h.layers[5].rope.factor, 8.0f);
  EXPECT_EQ(h.layers[0].rope.type, "default");
  EXPECT_FLOAT_EQ(h.final_logit_softcap, 30.0f);
}

INSTANTIATE_TEST_SUITE_P(All, Gemma3Golden, ::testing::Values("sw_v5", "hub_linear"));

}  // namespace
}  // namespace dfl
