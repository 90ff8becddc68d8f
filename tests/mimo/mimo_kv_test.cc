// Hybrid KV cache on MiMo: speculative append + rollback to every accepted length restores exactly
// the never-speculated state (sliding rings and full layers), sliding layers stay bounded for long
// contexts, and the real MiMo-V2-Flash config gives the KV formula of TARGETS-SPEC §3.5.
#include <gtest/gtest.h>

#include <cstring>

#include "common/golden.h"
#include "common/models.h"
#include "model/config.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace dfl {
namespace {

// Reference: prompt then greedy decode one token per forward; logits of every step.
struct Trace {
  std::vector<int32_t> tokens;             // prompt + generated
  std::vector<std::vector<float>> logits;  // logits after position p (p ≥ n_prompt - 1)
};

Trace greedy_trace(CausalLM& m, const std::vector<int32_t>& prompt, int32_t steps) {
  Trace t;
  t.tokens = prompt;
  ForwardOut out = test::run_forward(m, prompt, LogitsMode::kLast);
  for (int32_t i = 0; i < steps; ++i) {
    t.logits.push_back(out.logits);
    const int32_t tok = int32_t(ops::argmax(out.logits.data(), int64_t(out.logits.size())));
    t.tokens.push_back(tok);
    out = test::run_forward(m, {tok}, LogitsMode::kLast);
  }
  return t;
}

class MiMoRollback : public ::testing::TestWithParam<std::string> {};

TEST_P(MiMoRollback, EveryAcceptedLengthEqualsNeverSpeculating) {
  const std::string dir = test::fixture("mimo/" + GetParam());
  test::Golden g(dir + "/golden.safetensors");
  const auto prompt = g.i32("prompt_ids");
  const int32_t n = int32_t(prompt.size());
  constexpr int32_t B = 8, kSteps = 30, kAfter = 6;
  auto pool = test::make_pool(1);  // one thread: many tiny per-expert matmuls; the idle-sleeping pool makes 2 threads ~100x slower here
  LoadOptions o;
  o.max_block = B;
  auto ref_model = load_causal_lm(dir, o, *pool);
  const Trace ref = greedy_trace(*ref_model, prompt, kSteps);
  const int32_t V = ref_model->config().vocab_size;
  auto m = load_causal_lm(dir, o, *pool);
  int checked = 0;
  // Speculate at several depths (the window is 6 < B: blocks overwrite ring slots), rolling back
  // to every accepted length a ∈ [0, B).
  for (int32_t k : {0, 3, 9}) {
    for (int32_t a = 0; a < B; ++a) {
      m->kv().clear(0);
      std::vector<int32_t> pre(ref.tokens.begin(), ref.tokens.begin() + n + k);
      test::run_forward(*m, pre, LogitsMode::kNone);
      // Block: anchor + a correct tokens, then wrong ones.
      std::vector<int32_t> block(ref.tokens.begin() + n + k, ref.tokens.begin() + n + k + a + 1);
      while (int32_t(block.size()) < B) block.push_back((block.back() * 7 + 13) % 500);
      const ForwardOut bo = test::run_forward(*m, block, LogitsMode::kAll);
      // Verified rows equal the one-at-a-time logits, bitwise (row j sits at position n + k + j;
      // ref.logits[i] are the logits after position n - 1 + i).
      for (int32_t j = 0; j <= a; ++j)
        ASSERT_EQ(std::memcmp(bo.logits.data() + size_t(j) * V, ref.logits[k + j + 1].data(), V * 4), 0)
            << "k " << k << " a " << a << " row " << j;
      m->kv().truncate(0, n + k + a + 1);
      ASSERT_EQ(m->kv().length(0), n + k + a + 1);
      for (int32_t s = 0; s < kAfter; ++s) {
        const int32_t p = n + k + a + 1 + s;  // position of the token fed now
        const ForwardOut out = test::run_forward(*m, {ref.tokens[p]}, LogitsMode::kLast);
        ASSERT_EQ(std::memcmp(out.logits.data(), ref.logits[p - n + 1].data(), V * 4), 0)
            << "k " << k << " a " << a << " step " << s;
        ++checked;
      }
    }
  }
  std::printf("[mimo] %s rollback: %d continued steps bit-identical to never speculating\n",
              GetParam().c_str(), checked);
}

INSTANTIATE_TEST_SUITE_P(All, MiMoRollback, ::testing::Values("flash_split", "v25_fused"));

TEST(MiMoKv, SlidingLayersStayBoundedForLongContexts) {
  const std::string dir = test::fixture("mimo/flash_split");
  auto pool = test::make_pool(1);  // one thread: many tiny per-expert matmuls; the idle-sleeping pool makes 2 threads ~100x slower here
  LoadOptions o;
  o.max_block = 8;
  auto m = load_causal_lm(dir, o, *pool);
  const ModelConfig& c = m->config();
  const int32_t W = c.mimo->sliding_window;
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 300; ++i) ids.push_back((i * 37 + 11) % 506);
  test::run_forward(*m, ids, LogitsMode::kLast);  // 300 tokens, prefilled in chunks of 8
  EXPECT_EQ(m->kv().length(0), 300);
  const auto layout = kv_layout(c);
  std::vector<KvLayerSpec> full, sliding;
  KvViewScratch vs;
  for (int32_t il = 0; il < c.n_layers; ++il) {
    if (c.layers[il].attn == AttnKind::kSliding) {
      EXPECT_EQ(m->kv().view(0, il, vs).n_slots, W + 8) << il;
      sliding.push_back(layout[il]);
    } else {
      EXPECT_EQ(m->kv().view(0, il, vs).n_slots, 300) << il;
      full.push_back(layout[il]);
    }
  }
  ASSERT_FALSE(sliding.empty());
  ASSERT_FALSE(full.empty());
  const int64_t s300 = kv_bytes_per_sequence(sliding, 300, 8);
  EXPECT_EQ(s300, kv_bytes_per_sequence(sliding, 1 << 20, 8));  // constant in the context
  EXPECT_EQ(kv_bytes_per_sequence(full, 600, 8), 2 * kv_bytes_per_sequence(full, 300, 8));
  // Full layers are paged: 300 positions take 19 pages of 16 slots.
  EXPECT_EQ(m->kv().bytes_per_sequence(300), kv_bytes_per_sequence(full, 304, 8) + s300);
}

// TARGETS-SPEC §3.5 on the real config: full layers 4 kv × (192 + 128) × 2 B (bf16) × 9 layers =
// 23,040 B/token; SWA layers 8 × 320 × 2 B × 39 = 199,680 B per ring slot, W = 128 slots (+ slack).
// The engine stores fp32 (4 B), i.e. exactly twice these numbers.
TEST(MiMoKv, RealFlashConfigMatchesTheKvFormula) {
  const ModelConfig c = parse_model_config(
      test::read_text(test::fixture("mimo/real_configs/MiMo-V2-Flash.config.json")), "real");
  ASSERT_EQ(c.family, Family::kMiMoV2);
  ASSERT_EQ(c.n_layers, 48);
  std::vector<int32_t> full_ids;
  for (int32_t il = 0; il < 48; ++il)
    if (c.layers[il].attn == AttnKind::kFull) full_ids.push_back(il);
  EXPECT_EQ(full_ids, (std::vector<int32_t>{0, 5, 11, 17, 23, 29, 35, 41, 47}));
  const LayerSpec& f = c.layers[0];
  const LayerSpec& s = c.layers[1];
  EXPECT_EQ(f.n_kv_heads, 4);
  EXPECT_EQ(s.n_kv_heads, 8);
  EXPECT_EQ(f.head_dim, 192);
  EXPECT_EQ(f.v_head_dim, 128);
  EXPECT_EQ(f.rope.n_rot, 64);  // int(192 × 0.334)
  EXPECT_EQ(s.rope.n_rot, 64);
  EXPECT_FLOAT_EQ(f.rope.theta, 5e6f);
  EXPECT_FLOAT_EQ(s.rope.theta, 1e4f);
  EXPECT_FALSE(f.sinks);
  EXPECT_TRUE(s.sinks);
  EXPECT_EQ(s.window, (Window{127, 0}));  // 128 keys including the query (HF/vLLM)
  EXPECT_FALSE(c.layers[0].moe);
  for (int32_t il = 1; il < 48; ++il) EXPECT_TRUE(c.layers[il].moe);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.mimo->attention_value_scale, 0.707f);
  EXPECT_EQ(c.mimo->ckpt_tp, 4);
  EXPECT_FALSE(c.mimo->fused_qkv);
  EXPECT_EQ(c.moe->n_routed_experts, 256);
  EXPECT_EQ(c.moe->n_experts_per_tok, 8);
  EXPECT_FLOAT_EQ(c.moe->routed_scaling_factor, 1.0f);

  const auto layout = kv_layout(c);
  std::vector<KvLayerSpec> full, sliding;
  for (const auto& l : layout) (l.window ? sliding : full).push_back(l);
  ASSERT_EQ(full.size(), 9u);
  ASSERT_EQ(sliding.size(), 39u);
  constexpr int32_t kSlack = 16;
  EXPECT_EQ(kv_bytes_per_sequence(full, 1, kSlack), 2 * 23040);
  EXPECT_EQ(kv_bytes_per_sequence(sliding, 1 << 20, kSlack), 2 * int64_t(199680) * (128 + kSlack));
  const int64_t ctx = 32768;
  EXPECT_EQ(kv_bytes_per_sequence(layout, ctx, kSlack),
            2 * (23040 * ctx + int64_t(199680) * (128 + kSlack)));
}

TEST(MiMoKv, RealV25ConfigFusedLayout) {
  const ModelConfig c = parse_model_config(
      test::read_text(test::fixture("mimo/real_configs/MiMo-V2.5.config.json")), "real");
  ASSERT_EQ(c.family, Family::kMiMoV2);
  EXPECT_EQ(c.architecture, "MiMoV2ForCausalLM");
  EXPECT_TRUE(c.mimo->fused_qkv);
  EXPECT_EQ(c.mimo->ckpt_tp, 4);
  // Fused rows per shard: full 16·192 + 192 + 128 = 3392, SWA 3072 + 2·192 + 2·128 = 3712.
  const LayerSpec& f = c.layers[0];
  const LayerSpec& s = c.layers[1];
  EXPECT_EQ((f.n_heads * f.head_dim + f.n_kv_heads * (f.head_dim + f.v_head_dim)) / c.mimo->ckpt_tp, 3392);
  EXPECT_EQ((s.n_heads * s.head_dim + s.n_kv_heads * (s.head_dim + s.v_head_dim)) / c.mimo->ckpt_tp, 3712);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
}

TEST(MiMoKv, ConfigErrors) {
  std::string base = test::read_text(test::fixture("mimo/real_configs/MiMo-V2-Flash.config.json"));
  auto edit = [&](const std::string& key, const nlohmann::json& v) {
    auto j = nlohmann::json::parse(base);
    if (v.is_null()) j.erase(key); else j[key] = v;
    return j.dump();
  };
  EXPECT_THROW(parse_model_config(edit("hybrid_layer_pattern", nlohmann::json::array({0, 1}))), Error);
  EXPECT_THROW(parse_model_config(edit("scoring_func", "softmax")), Error);
  {
    auto j = nlohmann::json::parse(base);  // sliding_window_size is the fallback: both absent fail
    j.erase("sliding_window");
    EXPECT_EQ(parse_model_config(j.dump()).mimo->sliding_window, 128);
    j.erase("sliding_window_size");
    EXPECT_THROW(parse_model_config(j.dump()), Error);
  }
  EXPECT_THROW(parse_model_config(edit("swa_num_key_value_heads", 6)), Error);  // 6 % ckpt_tp 4
  EXPECT_THROW(parse_model_config(edit("attention_projection_layout", "interleaved")), Error);
}

}  // namespace
}  // namespace dfl
