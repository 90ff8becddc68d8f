// Loader error cases: broken copies of a fixture in a temp folder must be refused with a
// dfl::Error that names what is wrong (the tensor, the key, the architecture).
#include <gtest/gtest.h>

#include <string>

#include "common/golden.h"
#include "common/models.h"
#include "core/error.h"
#include "model/model.h"

namespace dfl {
namespace {

using test::StTensor;
using test::TempDir;

// Loads `dir` and returns the error message ("" if it loaded).
std::string load_error(const std::string& dir) {
  auto pool = test::make_pool(1);
  try {
    auto m = load_causal_lm(dir, LoadOptions{}, *pool);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// A temp copy of qwen3/tied_gqa2 whose tensors and config can be edited.
struct BrokenCopy {
  TempDir tmp{"loader"};
  std::map<std::string, StTensor> tensors;
  nlohmann::json config;
  explicit BrokenCopy(const std::string& name = "tied_gqa2") {
    const std::string src = test::fixture("qwen3/" + name);
    test::copy_folder(src, tmp.str());
    tensors = test::read_st(src + "/model.safetensors");
    config = test::read_json(src + "/config.json");
  }
  std::string write() {
    test::write_st(tmp.file("model.safetensors"), tensors);
    test::write_text(tmp.file("config.json"), config.dump(2));
    return tmp.str();
  }
};

StTensor zeros_f32(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return StTensor{"F32", shape, std::string(size_t(n) * 4, '\0')};
}

TEST(Qwen3Loader, UnmodifiedCopyLoads) {
  BrokenCopy b;
  EXPECT_EQ(load_error(b.write()), "");
}

TEST(Qwen3Loader, MissingTensorIsNamed) {
  BrokenCopy b;
  ASSERT_EQ(b.tensors.erase("model.layers.1.mlp.up_proj.weight"), 1u);
  const std::string e = load_error(b.write());
  EXPECT_TRUE(contains(e, "model.layers.1.mlp.up_proj.weight")) << e;
}

TEST(Qwen3Loader, MissingFinalNormIsNamed) {
  BrokenCopy b;
  ASSERT_EQ(b.tensors.erase("model.norm.weight"), 1u);
  const std::string e = load_error(b.write());
  EXPECT_TRUE(contains(e, "model.norm.weight")) << e;
}

TEST(Qwen3Loader, WrongShapeNamesTensorAndBothShapes) {
  BrokenCopy b;
  // tied_gqa2: 2 kv heads × head_dim 16 = 32 rows.
  b.tensors["model.layers.0.self_attn.k_proj.weight"] = zeros_f32({48, 64});
  const std::string e = load_error(b.write());
  EXPECT_TRUE(contains(e, "model.layers.0.self_attn.k_proj.weight")) << e;
  EXPECT_TRUE(contains(e, "[32, 64]")) << e;
  EXPECT_TRUE(contains(e, "[48, 64]")) << e;
}

TEST(Qwen3Loader, WrongRankNormIsNamed) {
  BrokenCopy b;
  b.tensors["model.layers.1.self_attn.q_norm.weight"] = zeros_f32({16, 1});
  const std::string e = load_error(b.write());
  EXPECT_TRUE(contains(e, "model.layers.1.self_attn.q_norm.weight")) << e;
}

TEST(Qwen3Loader, WrongDtypeIsNamed) {
  BrokenCopy b;
  b.tensors["model.layers.0.input_layernorm.weight"] = StTensor{"I32", {64}, std::string(256, '\0')};
  const std::string e = load_error(b.write());
  EXPECT_TRUE(contains(e, "model.layers.0.input_layernorm.weight")) << e;
}

TEST(Qwen3Loader, ConfigDisagreeingWithWeightsIsNamed) {
  BrokenCopy b;
  b.config["intermediate_size"] = 96;
  std::string e = load_error(b.write());
  EXPECT_TRUE(contains(e, "mlp.")) << e;
  EXPECT_TRUE(contains(e, "96")) << e;

  BrokenCopy c;
  c.config["num_hidden_layers"] = 3;
  e = load_error(c.write());
  EXPECT_TRUE(contains(e, "model.layers.2.")) << e;
}

TEST(Qwen3Loader, UnexpectedTensorIsNamed) {
  BrokenCopy b;
  b.tensors["model.layers.0.self_attn.q_proj.bias"] = zeros_f32({64});
  const std::string e = load_error(b.write());
  EXPECT_TRUE(contains(e, "model.layers.0.self_attn.q_proj.bias")) << e;
}

TEST(Qwen3Loader, UntiedConfigWithoutLmHeadIsNamed) {
  BrokenCopy b;  // tied_gqa2 has no lm_head.weight
  b.config["tie_word_embeddings"] = false;
  const std::string e = load_error(b.write());
  EXPECT_TRUE(contains(e, "lm_head.weight")) << e;
}

TEST(Qwen3Loader, TiedConfigToleratesAStoredLmHeadCopy) {
  BrokenCopy b("untied_gqa1");
  b.config["tie_word_embeddings"] = true;
  EXPECT_EQ(load_error(b.write()), "");
}

TEST(Qwen3Loader, UnknownArchitectureIsNamed) {
  BrokenCopy b;
  b.config["architectures"] = {"LlamaForCausalLM"};
  b.config["model_type"] = "llama";
  const std::string e = load_error(b.write());
  EXPECT_TRUE(contains(e, "LlamaForCausalLM")) << e;
}

TEST(Qwen3Loader, DrafterFolderIsNotATarget) {
  const std::string e = load_error(test::fixture("dflash/zlab_full/draft"));
  EXPECT_TRUE(contains(e, "drafter")) << e;
}

TEST(Qwen3Loader, MissingFolderOrConfig) {
  EXPECT_NE(load_error("/nonexistent/dfl/model"), "");
  TempDir t("noconfig");
  test::copy_folder(test::fixture("qwen3/tied_gqa2"), t.str());
  std::filesystem::remove(t.file("config.json"));
  EXPECT_TRUE(contains(load_error(t.str()), "config.json"));
}

TEST(Qwen3Loader, BadConfigValues) {
  {
    BrokenCopy b;
    b.config["num_key_value_heads"] = 3;  // 4 heads not a multiple of 3
    EXPECT_TRUE(contains(load_error(b.write()), "num_key_value_heads"));
  }
  {
    BrokenCopy b;
    b.config.erase("hidden_size");
    EXPECT_TRUE(contains(load_error(b.write()), "hidden_size"));
  }
  {
    BrokenCopy b;
    b.config["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
    EXPECT_TRUE(contains(load_error(b.write()), "dynamic"));
  }
  {
    BrokenCopy b;
    test::write_text(b.tmp.file("config.json"), "{ not json");
    EXPECT_TRUE(contains(load_error(b.tmp.str()), "JSON"));
  }
}

// The load-time weights format reaches every family on the shared skeleton (MiMo's FP8 matrices
// used to ignore it): q8 changes the bytes a decode step reads (half of bf16/fp32; FP8's 1 byte +
// scales becomes ~1.06), and still matches the stored weights closely.
TEST(Loader, WeightsFormatAppliesToEveryFamily) {
  auto pool = test::make_pool();
  for (const char* dir : {"qwen3/tied_gqa2", "mimo/flash_split", "gemma3/sw_v5"}) {
    LoadOptions stored, q8;
    stored.prepack = false;
    q8.weights_format = WeightsFormat::kQ8;
    auto a = load_causal_lm(test::fixture(dir), stored, *pool);
    auto b = load_causal_lm(test::fixture(dir), q8, *pool);
    if (std::string(dir).starts_with("mimo"))
      EXPECT_NE(b->weight_bytes_per_token(false), a->weight_bytes_per_token(false)) << dir;
    else
      EXPECT_LT(b->weight_bytes_per_token(false), a->weight_bytes_per_token(false)) << dir;
    const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
    const ForwardOut x = test::run_forward(*a, ids, LogitsMode::kLast);
    const ForwardOut y = test::run_forward(*b, ids, LogitsMode::kLast);
    double num = 0, den = 0;
    for (size_t i = 0; i < x.logits.size(); ++i) {
      num += (x.logits[i] - y.logits[i]) * (x.logits[i] - y.logits[i]);
      den += x.logits[i] * x.logits[i];
    }
    EXPECT_GT(num, 0.0) << dir << ": q8 did not change the weights";
    EXPECT_LT(num / den, 1e-2) << dir;
  }
}

}  // namespace
}  // namespace dfl
