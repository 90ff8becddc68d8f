// Qwen3.5 hybrid targets (Gated DeltaNet + gated attention) against transformers goldens
// (tools/ref/make_qwen35_fixtures.py, tests/fixtures/qwen35/<name>), and the exactness of the
// recurrent-state rollback.
//
// Tolerances as qwen3_golden_test.cc: embed exact; layer_out / logits / greedy-step logits
// ≤ 1e-4 abs (HF prefill uses the chunked GDN form, we use the recurrence everywhere; both fp32);
// greedy ids exact. Rollback: memcmp (bit-identical states and logits).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "common/golden.h"
#include "common/models.h"
#include "kernels/ops.h"
#include "model/decoder.h"
#include "model/gdn.h"
#include "model/model.h"

namespace dfl {
namespace {

using test::Golden;
using test::max_abs_diff;

constexpr double kTol = 1e-4;

// Param: the fixture folder under tests/fixtures (qwen35/* and the Llama-3 ones, llama/*).
class HfGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGolden, PromptAndGreedyMatchTransformers) {
  const std::string dir = test::fixture(GetParam());
  Golden g(dir + "/golden.safetensors");
  auto pool = test::make_pool();
  auto model = load_causal_lm(dir, LoadOptions{}, *pool);
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.family, GetParam().rfind("llama/", 0) == 0 ? Family::kLlama : Family::kQwen35);
  const int32_t L = c.n_layers, H = c.hidden_size, V = c.vocab_size;
  const auto prompt = g.i32("prompt_ids");
  const int32_t n = static_cast<int32_t>(prompt.size());
  const auto aux = test::iota_ids(L + 1);
  ForwardOut out = test::run_forward(*model, prompt, LogitsMode::kAll, &aux);
  auto aux_col = [&](int32_t j) {
    std::vector<float> m(size_t(n) * H);
    for (int32_t t = 0; t < n; ++t)
      std::copy_n(out.aux.data() + (size_t(t) * (L + 1) + j) * H, H, m.data() + size_t(t) * H);
    return m;
  };
  EXPECT_EQ(max_abs_diff(aux_col(0), g.f32("embed")), 0.0);
  const auto layer_out = g.f32("layer_out");
  double e_layers = 0;
  for (int32_t il = 0; il < L; ++il) {
    const auto ours = aux_col(il + 1);
    const double e = max_abs_diff(ours.data(), layer_out.data() + size_t(il) * n * H, ours.size());
    EXPECT_LE(e, kTol) << "layer_out[" << il << "]";
    e_layers = std::max(e_layers, e);
  }
  const double e_logits = max_abs_diff(out.logits, g.f32("logits"));
  EXPECT_LE(e_logits, kTol);
  const auto greedy = g.i32("greedy_ids");
  const auto gl = g.f32("greedy_logits");
  double e_steps = max_abs_diff(out.logits.data() + size_t(n - 1) * V, gl.data(), V);
  int32_t tok = int32_t(ops::argmax(out.logits.data() + size_t(n - 1) * V, V));
  std::vector<int32_t> ours{tok};
  for (size_t i = 1; i < greedy.size(); ++i) {
    ForwardOut st = test::run_forward(*model, {tok}, LogitsMode::kLast);
    e_steps = std::max(e_steps, max_abs_diff(st.logits.data(), gl.data() + i * V, V));
    tok = int32_t(ops::argmax(st.logits.data(), V));
    ours.push_back(tok);
  }
  EXPECT_EQ(ours, greedy);
  EXPECT_LE(e_steps, kTol);
  std::printf("[%s] n=%d max|Δlayer_out|=%.3g max|Δlogits|=%.3g greedy 32 %s, "
              "max|Δstep logits|=%.3g\n", GetParam().c_str(), n, e_layers, e_logits,
              ours == greedy ? "identical" : "DIFFER", e_steps);
}

INSTANTIATE_TEST_SUITE_P(Qwen35, HfGolden,
                         ::testing::Values("qwen35/flat_untied", "qwen35/nested_tied",
                                           "qwen35/moe_fused", "qwen35/moe_per_expert"));
INSTANTIATE_TEST_SUITE_P(Llama3, HfGolden, ::testing::Values("llama/llama3_rope", "llama/tied"));

TEST(Llama3Config, Llama3RopeScalingParses) {
  const ModelConfig c = load_model_config(test::fixture("llama/llama3_rope"));
  EXPECT_EQ(c.layers[0].rope.type, "llama3");
  EXPECT_FLOAT_EQ(c.layers[0].rope.factor, 8.0f);
  EXPECT_EQ(c.layers[0].rope.original_max_position, 64);
}

TEST(Qwen35Config, NestedAndFlatParse) {
  for (const char* n : {"flat_untied", "nested_tied"}) {
    const ModelConfig c = load_model_config(test::fixture(std::string("qwen35/") + n));
    ASSERT_TRUE(c.gdn.has_value()) << n;
    EXPECT_EQ(c.layers[0].mixer, MixerKind::kGatedDeltaNet);
    EXPECT_EQ(c.layers[3].mixer, MixerKind::kAttention) << n;
    EXPECT_TRUE(c.layers[3].out_gate);
    EXPECT_EQ(c.layers[3].rope.n_rot, 4) << n;  // partial_rotary_factor 0.25 of head_dim 16
    EXPECT_FLOAT_EQ(c.layers[3].rope.theta, 10000.0f);
    EXPECT_EQ(c.tie_word_embeddings, std::string(n) == "nested_tied");
    EXPECT_EQ(int(kv_layout(c).size()), std::string(n) == "flat_untied" ? 1 : 2);
  }
}

// The committed states of slot `s`: every linear layer's conv and ssm state, concatenated.
std::vector<float> states_of(const CausalLM& m, int32_t s) {
  const RecurrentState* r = dynamic_cast<const DecoderLM&>(m).recurrent();
  std::vector<float> v;
  const RecurrentSpec& sp = r->spec();
  for (int32_t l = 0; l < sp.n_layers; ++l) {
    v.insert(v.end(), r->conv(s, l), r->conv(s, l) + sp.conv_floats());
    v.insert(v.end(), r->ssm(s, l), r->ssm(s, l) + sp.ssm_floats());
  }
  return v;
}

ForwardOut fwd(CausalLM& m, int32_t seq, const std::vector<int32_t>& toks, LogitsMode mode) {
  return test::run_forward(m, toks, mode, nullptr, seq);
}

// After a verify block of B tokens accepts a (rollback to d + a + 1), the recurrent states, the
// KV length and the next logits equal — bit for bit — decoding those a + 1 tokens one at a time;
// every a in 0..B-1, at three depths, on both fixtures. The block's rows 0..a also have exactly
// the logits the tokens get decoded alone.
TEST(Qwen35Rollback, EveryAcceptedLengthIsBitExact) {
  constexpr int32_t B = 16;
  for (const char* name : {"flat_untied", "nested_tied", "moe_fused"}) {
    auto pool = test::make_pool();
    LoadOptions lo;
    lo.n_seqs = 2;
    lo.max_block = B;
    auto m = load_causal_lm(test::fixture(std::string("qwen35/") + name), lo, *pool);
    const int32_t V = m->config().vocab_size;
    std::vector<int32_t> text(80);
    for (size_t i = 0; i < text.size(); ++i) text[i] = int32_t((i * 7919 + 13) % V);
    for (int32_t depth : {1, 22, 47}) {
      const std::vector<int32_t> prefix(text.begin(), text.begin() + depth);
      const std::vector<int32_t> block(text.begin() + depth, text.begin() + depth + B);
      for (int32_t a = 0; a < B; ++a) {
        m->release(0);
        m->release(1);
        fwd(*m, 0, prefix, LogitsMode::kNone);
        fwd(*m, 1, prefix, LogitsMode::kNone);
        ASSERT_EQ(states_of(*m, 0), states_of(*m, 1));
        const ForwardOut vb = fwd(*m, 0, block, LogitsMode::kAll);
        m->rollback(0, depth + a + 1);
        for (int32_t t = 0; t <= a; ++t) {
          const ForwardOut one = fwd(*m, 1, {block[t]}, LogitsMode::kLast);
          ASSERT_EQ(0, std::memcmp(one.logits.data(), vb.logits.data() + size_t(t) * V,
                                   sizeof(float) * V))
              << name << " depth " << depth << " row " << t;
        }
        EXPECT_EQ(m->kv().length(0), depth + a + 1);
        const auto s0 = states_of(*m, 0), s1 = states_of(*m, 1);
        ASSERT_EQ(s0.size(), s1.size());
        ASSERT_EQ(0, std::memcmp(s0.data(), s1.data(), sizeof(float) * s0.size()))
            << name << " depth " << depth << " accepted " << a;
        // Both continue identically.
        const ForwardOut n0 = fwd(*m, 0, {text[70]}, LogitsMode::kLast);
        const ForwardOut n1 = fwd(*m, 1, {text[70]}, LogitsMode::kLast);
        ASSERT_EQ(0, std::memcmp(n0.logits.data(), n1.logits.data(), sizeof(float) * V));
      }
    }
  }
}

// Dropping a whole block, a no-op rollback, and a KV-only truncate (calibration) caught up by
// the next forward.
TEST(Qwen35Rollback, WholeBlockNoOpAndKvOnlyTruncate) {
  auto pool = test::make_pool();
  LoadOptions lo;
  lo.n_seqs = 2;
  auto m = load_causal_lm(test::fixture("qwen35/flat_untied"), lo, *pool);
  const std::vector<int32_t> p = {5, 9, 11, 40, 3}, blk = {7, 8, 9, 10};
  fwd(*m, 0, p, LogitsMode::kNone);
  fwd(*m, 1, p, LogitsMode::kNone);
  fwd(*m, 0, blk, LogitsMode::kAll);
  m->rollback(0, 5);
  EXPECT_EQ(states_of(*m, 0), states_of(*m, 1));
  fwd(*m, 0, blk, LogitsMode::kAll);
  m->rollback(0, 9);  // no-op
  fwd(*m, 1, blk, LogitsMode::kAll);
  EXPECT_EQ(states_of(*m, 0), states_of(*m, 1));
  fwd(*m, 0, {1, 2}, LogitsMode::kAll);
  m->kv().truncate(0, 9);
  const ForwardOut a = fwd(*m, 0, {3}, LogitsMode::kLast);
  const ForwardOut b = fwd(*m, 1, {3}, LogitsMode::kLast);
  EXPECT_EQ(a.logits, b.logits);
  // A partial rollback outside the last forward is refused.
  EXPECT_THROW(m->rollback(0, 4), Error);
  // A forward that throws (token id out of range) leaves the committed state usable.
  const auto before = states_of(*m, 0);
  const int32_t len = m->kv().length(0);
  EXPECT_THROW(fwd(*m, 0, {1, 100000}, LogitsMode::kLast), Error);
  m->rollback(0, len);
  EXPECT_EQ(states_of(*m, 0), before);
  const ForwardOut c = fwd(*m, 0, {4}, LogitsMode::kLast);
  const ForwardOut d = fwd(*m, 1, {4}, LogitsMode::kLast);
  EXPECT_EQ(c.logits, d.logits);
}

}  // namespace
}  // namespace dfl

namespace dfl {
namespace {

// The published configs (tests/fixtures/configs, tools/ref/make_hybrid_configs.py): layer kinds,
// recurrent state and KV sizes computed from the geometry by hand here.
TEST(HybridConfigs, PublishedTargetsParseWithTheirStateSizes) {
  struct Want {
    const char* name;
    int32_t layers, linear, hv;
    int64_t conv_dim;
  };
  for (const Want& w : {Want{"Qwen3.5-4B", 32, 24, 32, 8192}, Want{"Qwen3.5-9B", 32, 24, 32, 8192},
                        Want{"Qwen3.5-27B", 64, 48, 48, 10240}, Want{"Qwen3.5-35B-A3B", 40, 30, 32, 8192},
                        Want{"Qwen3.6-27B", 64, 48, 48, 10240}, Want{"Qwen3.6-35B-A3B", 40, 30, 32, 8192},
                        Want{"Qwen3.8-27B", 64, 48, 48, 10240}}) {
    const ModelConfig c = load_model_config(test::fixture(std::string("configs/") + w.name));
    EXPECT_EQ(c.family, Family::kQwen35) << w.name;
    EXPECT_EQ(c.n_layers, w.layers);
    EXPECT_EQ(n_recurrent_layers(c), w.linear) << w.name;
    for (int32_t il = 0; il < c.n_layers; ++il)
      EXPECT_EQ(c.layers[il].mixer, il % 4 == 3 ? MixerKind::kAttention : MixerKind::kGatedDeltaNet);
    EXPECT_EQ(c.layers[3].rope.n_rot, 64);  // 0.25 × 256
    EXPECT_FLOAT_EQ(c.layers[3].rope.theta, 1e7f);
    const RecurrentSpec rs = recurrent_spec(c);
    EXPECT_EQ(rs.conv_dim, w.conv_dim);
    // per layer: Hv·128·128 + conv_dim·3 floats
    const int64_t per_layer = (int64_t(w.hv) * 128 * 128 + w.conv_dim * 3) * 4;
    EXPECT_EQ(recurrent_state_bytes(rs), w.linear * per_layer) << w.name;
    // KV: only the full layers, fp32 K and V of nkv·256 each
    const auto kv = kv_layout(c);
    EXPECT_EQ(int32_t(kv.size()), w.layers - w.linear);
    EXPECT_EQ(kv_bytes_per_sequence(kv, 1, 16),
              int64_t(w.layers - w.linear) * 2 * c.layers[3].n_kv_heads * 256 * 4);
  }
  // TARGETS-SPEC §7: 27B state ≈ 151 MiB-class (48×48×128×128×4 + conv), bf16 KV 65,536 B/token.
  const ModelConfig b = load_model_config(test::fixture("configs/Qwen3.5-27B"));
  EXPECT_EQ(recurrent_state_bytes(recurrent_spec(b)), 156893184);
  EXPECT_EQ(kv_bytes_per_sequence(kv_layout(b), 1, 16) / 2, 65536);
  const ModelConfig m = load_model_config(test::fixture("configs/Qwen3.5-35B-A3B"));
  ASSERT_TRUE(m.moe.has_value());
  EXPECT_EQ(m.moe->n_routed_experts, 256);
  EXPECT_EQ(m.moe->n_experts_per_tok, 8);
  EXPECT_EQ(m.moe->scoring_func, "softmax");
  EXPECT_EQ(m.moe->shared_intermediate_size, 512);
  EXPECT_EQ(kv_bytes_per_sequence(kv_layout(m), 1, 16) / 2, 20480);
}

TEST(HybridConfigs, DrafterDialectsAndTaps) {
  auto load = [](const char* n) { return load_model_config(test::fixture(std::string("configs/") + n)); };
  const ModelConfig z = load("Qwen3.6-35B-A3B-DFlash");
  EXPECT_EQ(z.dflash->dialect, "z-lab");
  EXPECT_EQ(z.dflash->mask_token_id, 248077);  // past the tokenizer's 248077 entries: embedding row
  EXPECT_EQ(z.dflash->target_layer_ids, (std::vector<int32_t>{1, 6, 11, 16, 22, 27, 32, 37}));
  EXPECT_EQ(z.layers[0].attn, AttnKind::kSliding);
  EXPECT_EQ(z.layers[0].window.left + 1, 4096);
  EXPECT_EQ(z.layers[0].window.right, 0);  // causal
  EXPECT_EQ(z.layers[5].attn, AttnKind::kFull);
  const ModelConfig s = load("Qwen3.6-35B-A3B-speculator.dflash");
  EXPECT_EQ(s.dflash->dialect, "speculators");
  EXPECT_EQ(s.architecture, "DFlashSpeculator");
  EXPECT_EQ(s.dflash->target_layer_ids, (std::vector<int32_t>{0, 9, 18, 27, 36}));  // aux − 1
  EXPECT_EQ(s.dflash->mask_token_id, 248077);
  EXPECT_EQ(s.dflash->draft_vocab_size, 32000);
  EXPECT_EQ(s.dflash->verifier, "Qwen/Qwen3.6-35B-A3B");
  // sliding_window_non_causal false: sliding layers causal, full layers bidirectional (the
  // speculators reference mask); this drafter has full layers only.
  EXPECT_FALSE(s.dflash->causal.has_value());
  EXPECT_EQ(s.layers[0].window.right, -1);
  EXPECT_EQ(s.hidden_size, 2048);
  EXPECT_EQ(s.n_layers, 5);
  // to_diff_dict(): keys at the Qwen3Config defaults are absent and take those defaults.
  {
    nlohmann::json j = test::read_json(test::fixture("configs/Qwen3.6-35B-A3B-speculator.dflash/config.json"));
    j["transformer_layer_config"].erase("num_key_value_heads");
    j["transformer_layer_config"].erase("max_position_embeddings");
    j["transformer_layer_config"]["layer_types"] = {"sliding_attention", "full_attention"};
    j["transformer_layer_config"]["num_hidden_layers"] = 2;
    j["transformer_layer_config"]["sliding_window"] = 64;
    j["transformer_layer_config"]["use_sliding_window"] = true;
    j["transformer_layer_config"]["max_window_layers"] = 2;
    j.erase("block_size");
    const ModelConfig t = parse_model_config(j.dump());
    EXPECT_EQ(t.layers[0].n_kv_heads, 32);
    EXPECT_EQ(t.max_position_embeddings, 32768);
    EXPECT_EQ(t.dflash->block_size, 8);
    EXPECT_EQ(t.layers[0].attn, AttnKind::kSliding);
    EXPECT_EQ(t.layers[0].window.right, 0);   // sliding: causal
    EXPECT_EQ(t.layers[1].window.right, -1);  // full: bidirectional
    j["sliding_window_non_causal"] = true;
    const ModelConfig u = parse_model_config(j.dump());
    EXPECT_NE(u.layers[0].window.right, 0);   // sliding, non-causal
  }
  const ModelConfig e = load("eagle-aux-causal-drafter");
  EXPECT_EQ(e.dflash->dialect, "eagle-aux");
  EXPECT_EQ(e.dflash->target_layer_ids, (std::vector<int32_t>{1, 10, 19, 28, 37}));
  EXPECT_EQ(e.dflash->causal, std::optional<bool>(true));
  for (const char* n : {"Qwen3.5-9B-DFlash", "Qwen3.5-4B-DFlash", "Qwen3.5-27B-DFlash",
                        "Qwen3.5-35B-A3B-DFlash", "Qwen3.6-27B-DFlash"}) {
    const ModelConfig d = load(n);
    EXPECT_EQ(d.dflash->mask_token_id, 248070) << n;
    EXPECT_EQ(d.dflash->block_size, 16) << n;
  }
  EXPECT_EQ(load("Qwen3.5-9B-DFlash").dflash->target_layer_ids,
            (std::vector<int32_t>{1, 8, 15, 22, 29}));
}

}  // namespace
}  // namespace dfl
