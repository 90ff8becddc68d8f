// Gemma 4 text target vs the transformers 5.24 goldens (tools/ref/make_gemma4_fixtures.py): the
// prompt forward (embedding × sqrt(H), plain-weight sandwich norms, q/k norms and the no-scale v
// norm, attention_k_eq_v global layers with their own head_dim / KV heads and proportional RoPE,
// sliding W = 8, layer_scalar, final soft-cap 30; the MoE branch beside the dense GeGLU) and 32
// cached greedy steps; the config as transformers saves it and in the hub layout.
#include <gtest/gtest.h>

#include <cmath>

#include "common/decoder_golden.h"
#include "common/models.h"
#include "kernels/ops.h"
#include "model/arch/gemma_common.h"
#include "model/model.h"

namespace dfl {
namespace {

class Gemma4Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4Golden, PromptForwardAndGreedyMatchTransformers) {
  test::expect_matches_golden(test::fixture("gemma4/" + GetParam()), "gemma4/" + GetParam());
}

INSTANTIATE_TEST_SUITE_P(All, Gemma4Golden, ::testing::Values("dense_v5", "moe_hub"));

// The same checkpoints as llama.cpp's converter writes them (tools/ref/make_gemma4_gguf_fixtures.py,
// gguf-py): Q8_0 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K matrices and Q8_0 fused 3-D experts against transformers on the
// weights the file holds (dequantized by gguf-py).
class Gemma4Gguf : public ::testing::TestWithParam<std::string> {};

// The comparison is at fp32 GGML activations: the reference multiplies the dequantized weights in
// fp32, so 1e-4 holds only there; the default int8x2 activations are held to their own tolerance
// against transformers by the GgufDialect and Gemma3Real tests.
TEST_P(Gemma4Gguf, PromptForwardAndGreedyMatchTransformers) {
  const GgmlActivations old = ggml_activations();
  set_ggml_activations(GgmlActivations::kFp32);
  struct Restore { GgmlActivations a; ~Restore() { set_ggml_activations(a); } } restore{old};
  const std::string base = test::fixture("gemma4/gguf/" + GetParam());
  test::expect_matches_golden(base + "/model.gguf", base + ".golden.safetensors", "gemma4/gguf/" + GetParam());
}

INSTANTIATE_TEST_SUITE_P(All, Gemma4Gguf, ::testing::Values("dense_quant", "moe_quant", "dense_kquant"));

TEST(Gemma4Gguf, ConfigFromMetadataEqualsTheHubConfig) {
  for (const auto& [gguf, hf] : {std::pair{"dense_quant", "dense_v5"}, std::pair{"moe_quant", "moe_hub"}}) {
    const ModelConfig g = load_model_config(test::fixture(std::string("gemma4/gguf/") + gguf + "/model.gguf"));
    const ModelConfig h = load_model_config(test::fixture(std::string("gemma4/") + hf));
    EXPECT_EQ(g.family, Family::kGemma4);
    EXPECT_TRUE(g.gguf);
    ASSERT_EQ(g.n_layers, h.n_layers);
    for (int il = 0; il < g.n_layers; ++il) {
      const LayerSpec &a = g.layers[il], &b = h.layers[il];
      EXPECT_EQ(a.attn, b.attn) << gguf << " " << il;
      EXPECT_EQ(a.window, b.window);
      EXPECT_EQ(a.head_dim, b.head_dim);
      EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
      EXPECT_EQ(a.v_from_k, b.v_from_k);
      EXPECT_EQ(a.rope, b.rope) << gguf << " " << il;
      EXPECT_EQ(a.moe, b.moe);
    }
    EXPECT_FLOAT_EQ(g.final_logit_softcap, h.final_logit_softcap);
    EXPECT_EQ(g.moe.has_value(), h.moe.has_value());
  }
}

TEST(Gemma4Config, LayerKindsGeometryAndRopes) {
  for (const char* name : {"dense_v5", "moe_hub"}) {
    const ModelConfig c = load_model_config(test::fixture(std::string("gemma4/") + name));
    EXPECT_EQ(c.family, Family::kGemma4);
    for (int il = 0; il < c.n_layers; ++il) {
      const LayerSpec& l = c.layers[il];
      const bool global = il % 6 == 5;
      EXPECT_EQ(l.attn, global ? AttnKind::kFull : AttnKind::kSliding) << name << " " << il;
      EXPECT_EQ(l.window, global ? (Window{-1, 0}) : (Window{7, 0})) << name << " " << il;
      EXPECT_EQ(l.head_dim, global ? 32 : 16);
      EXPECT_EQ(l.v_head_dim, l.head_dim);
      EXPECT_EQ(l.n_kv_heads, global ? 1 : 2);
      EXPECT_EQ(l.v_from_k, global);
      EXPECT_FLOAT_EQ(l.attn_scale, 1.0f);
      EXPECT_EQ(l.rope.type, global ? "proportional" : "default");
      EXPECT_FLOAT_EQ(l.rope.theta, global ? 1e6f : 1e4f);
      EXPECT_EQ(l.rope.n_rot, l.head_dim);
      if (global) EXPECT_EQ(l.rope.n_angles, 4);  // int(0.25 · 32 / 2)
    }
    EXPECT_FALSE(c.norm_plus_one);
    EXPECT_FLOAT_EQ(c.embed_scale, 8.0f);
    EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
  }
  const ModelConfig m = load_model_config(test::fixture("gemma4/moe_hub"));
  ASSERT_TRUE(m.moe.has_value());
  EXPECT_EQ(m.moe->n_routed_experts, 4);
  EXPECT_EQ(m.moe->n_experts_per_tok, 2);
  EXPECT_TRUE(m.moe->gelu_experts);
  EXPECT_EQ(m.moe->scoring_func, "softmax");
}

// transformers' Gemma scaled embedding: "sqrt(3072)=55.4256 to become 55.5" for bf16 tables.
TEST(GemmaEmbedScale, RoundedToTheTableDtype) {
  const float s = std::sqrt(3072.0f);
  EXPECT_EQ(gemma::embed_scale_in(DType::kBF16, s), 55.5f);
  EXPECT_EQ(gemma::embed_scale_in(DType::kF32, s), s);
  EXPECT_EQ(gemma::embed_scale_in(DType::kQ8_0, s), s);  // GGUF: transformers dequantizes to fp32
  EXPECT_EQ(gemma::embed_scale_in(DType::kBF16, 8.0f), 8.0f);
}

TEST(Gemma4Config, RefusesWhatIsNotSupported) {
  const std::string base = R"({"architectures": ["Gemma4ForCausalLM"], "hidden_size": 64,
    "num_hidden_layers": 2, "vocab_size": 32, "intermediate_size": 8, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 16, "sliding_window": 8)";
  EXPECT_NO_THROW(parse_model_config(base + R"(, "hidden_size_per_layer_input": 0})"));
  EXPECT_NO_THROW(parse_model_config(base + R"(, "hidden_size_per_layer_input": null})"));
  // transformers' default hidden_size_per_layer_input is 256 (per-layer embeddings, E2B/E4B).
  EXPECT_THROW(parse_model_config(base + "}"), Error);
  EXPECT_THROW(parse_model_config(base + R"(, "hidden_size_per_layer_input": 0,
    "num_kv_shared_layers": 1})"), Error);
  EXPECT_THROW(parse_model_config(base + R"(, "hidden_size_per_layer_input": 0,
    "use_bidirectional_attention": "all"})"), Error);
  EXPECT_THROW(parse_model_config(base + R"(, "hidden_size_per_layer_input": 0,
    "per_layer_config": {"1": {"sliding_window": 4}}})"), Error);
}

}  // namespace
}  // namespace dfl
