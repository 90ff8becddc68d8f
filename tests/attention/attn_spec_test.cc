// DFLASH-SPEC §3.1 (`_resolve_layer_attention` / `_dflash_layer_causal`), §3.4
// (`_maybe_symmetrize_window`) and §1.1 (`build_target_layer_ids`), plus drafter config parsing.
// Expected values are written from the spec tables, not from our output.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/attn_spec.h"
#include "common/golden.h"
#include "core/error.h"
#include "kernels/visibility.h"
#include "model/config.h"

namespace dfl {
namespace {

using Types = std::vector<std::string>;
const std::string kFull = "full_attention", kSlide = "sliding_attention";

// (kind, W, causal, window) for every layer.
struct Want {
  AttnKind kind;
  int32_t w;
  bool causal;
  Window window;
};

void expect_layers(const DraftAttnConfig& c, int n, const std::vector<Want>& want) {
  ASSERT_EQ(int(want.size()), n);
  for (int il = 0; il < n; ++il) {
    const ResolvedAttn r = resolve_draft_layer_attention(c, il, n);
    EXPECT_EQ(r.kind, want[il].kind) << "layer " << il;
    EXPECT_EQ(r.sliding_window, want[il].w) << "layer " << il;
    EXPECT_EQ(r.causal, want[il].causal) << "layer " << il;
    EXPECT_EQ(r.window, want[il].window) << "layer " << il << " window (" << r.window.left << ", "
                                         << r.window.right << ")";
  }
}

constexpr AttnKind F = AttnKind::kFull, S = AttnKind::kSliding;

// Row 1: layer_types with ≥ 1 sliding layer → per-layer types; sliding ⇒ causal, full ⇒ not.
TEST(ResolveDraftAttention, LayerTypesWithSlidingArePerLayer) {
  DraftAttnConfig c;
  c.layer_types = Types{kSlide, kFull, kSlide};
  c.sliding_window = 4;
  expect_layers(c, 3, {{S, 4, true, {3, 0}}, {F, 0, false, {-1, -1}}, {S, 4, true, {3, 0}}});
  // use_swa does NOT override mixed layer_types (the code, not the docstring).
  c.use_swa = true;
  expect_layers(c, 3, {{S, 4, true, {3, 0}}, {F, 0, false, {-1, -1}}, {S, 4, true, {3, 0}}});
}

// Row 2: layer_types all full + use_swa → every layer sliding (non-causal: no layer is typed sliding).
TEST(ResolveDraftAttention, AllFullLayerTypesPlusUseSwaMakesAllSliding) {
  DraftAttnConfig c;
  c.layer_types = Types{kFull, kFull};
  c.use_swa = true;
  c.swa_window_size = 5;
  expect_layers(c, 2, {{S, 5, false, {4, 4}}, {S, 5, false, {4, 4}}});
  c.use_swa = false;  // same list without use_swa: classic full non-causal
  expect_layers(c, 2, {{F, 0, false, {-1, -1}}, {F, 0, false, {-1, -1}}});
}

// Row 3: no layer_types → sliding iff use_swa (MiMo: non-causal SWA everywhere).
TEST(ResolveDraftAttention, NoLayerTypesUseSwa) {
  DraftAttnConfig c;
  c.use_swa = true;
  c.swa_window_size = 4;
  expect_layers(c, 2, {{S, 4, false, {3, 3}}, {S, 4, false, {3, 3}}});
}

// Row 4: no layer_types, no use_swa → classic DFlash: full, non-causal, even with a
// sliding_window value lying around.
TEST(ResolveDraftAttention, NoLayerTypesNoUseSwaIsClassic) {
  DraftAttnConfig c;
  expect_layers(c, 2, {{F, 0, false, {-1, -1}}, {F, 0, false, {-1, -1}}});
  c.sliding_window = 7;
  expect_layers(c, 2, {{F, 0, false, {-1, -1}}, {F, 0, false, {-1, -1}}});
}

// Window size: dflash_config.swa_window_size first, else top-level sliding_window.
TEST(ResolveDraftAttention, WindowSizeSource) {
  DraftAttnConfig c;
  c.use_swa = true;
  c.sliding_window = 9;
  expect_layers(c, 1, {{S, 9, false, {8, 8}}});
  c.swa_window_size = 3;
  expect_layers(c, 1, {{S, 3, false, {2, 2}}});
  DraftAttnConfig t;
  t.layer_types = Types{kSlide};
  t.swa_window_size = 6;
  expect_layers(t, 1, {{S, 6, true, {5, 0}}});
}

TEST(ResolveDraftAttention, SlidingWithoutWindowIsAnError) {
  DraftAttnConfig c;
  c.use_swa = true;
  EXPECT_THROW(resolve_draft_layer_attention(c, 0, 2), Error);
  DraftAttnConfig t;
  t.layer_types = Types{kSlide, kFull};
  EXPECT_THROW(resolve_draft_layer_attention(t, 0, 2), Error);
  // A full layer of a mixed config still fails? Only sliding layers need a window.
  EXPECT_NO_THROW(resolve_draft_layer_attention(t, 1, 2));
}

TEST(ResolveDraftAttention, UnknownLayerTypeAndWrongLengthAreErrors) {
  DraftAttnConfig c;
  c.layer_types = Types{kFull, "chunked_attention"};
  try {
    resolve_draft_layer_attention(c, 0, 2);
    ADD_FAILURE() << "unknown layer type accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chunked_attention"), std::string::npos) << e.what();
  }
  DraftAttnConfig d;
  d.layer_types = Types{kFull, kFull};
  EXPECT_THROW(resolve_draft_layer_attention(d, 0, 3), Error);
}

// Causality precedence: top-level is_causal > dflash_config.causal > (layer_types sliding ⇒ causal).
TEST(ResolveDraftAttention, CausalityPrecedence) {
  DraftAttnConfig c;
  c.layer_types = Types{kSlide, kFull};
  c.sliding_window = 4;
  // (3) default from layer types.
  expect_layers(c, 2, {{S, 4, true, {3, 0}}, {F, 0, false, {-1, -1}}});
  // (2) dflash_config.causal applies to all layers.
  c.dflash_causal = false;
  expect_layers(c, 2, {{S, 4, false, {3, 3}}, {F, 0, false, {-1, -1}}});
  c.dflash_causal = true;
  expect_layers(c, 2, {{S, 4, true, {3, 0}}, {F, 0, true, {-1, 0}}});
  // (1) top-level is_causal beats dflash_config.causal.
  c.is_causal = false;
  expect_layers(c, 2, {{S, 4, false, {3, 3}}, {F, 0, false, {-1, -1}}});
  c.dflash_causal = false;
  c.is_causal = true;
  expect_layers(c, 2, {{S, 4, true, {3, 0}}, {F, 0, true, {-1, 0}}});
  // use_swa drafters (no layer_types) made causal by dflash_config.causal.
  DraftAttnConfig m;
  m.use_swa = true;
  m.swa_window_size = 4;
  m.dflash_causal = true;
  expect_layers(m, 1, {{S, 4, true, {3, 0}}});
}

TEST(SymmetrizeWindow, SeedSemantics) {
  EXPECT_EQ(symmetrize_window({5, 0}, false), (Window{5, 5}));
  EXPECT_EQ(symmetrize_window({-1, 0}, false), (Window{-1, -1}));
  EXPECT_EQ(symmetrize_window({5, 0}, true), (Window{5, 0}));
  EXPECT_EQ(symmetrize_window({-1, 0}, true), (Window{-1, 0}));
  EXPECT_EQ(symmetrize_window({3, 3}, false), (Window{3, 3}));
  EXPECT_EQ(symmetrize_window({3, 3}, true), (Window{3, 3}));
  EXPECT_EQ(symmetrize_window({-1, -1}, false), (Window{-1, -1}));
  EXPECT_EQ(symmetrize_window({0, 0}, false), (Window{0, 0}));
}

TEST(CausalWindow, FlashAttentionConvention) {
  EXPECT_EQ(causal_window(AttnKind::kFull, 0), (Window{-1, 0}));
  EXPECT_EQ(causal_window(AttnKind::kSliding, 4), (Window{3, 0}));
  EXPECT_EQ(causal_window(AttnKind::kSliding, 4, WindowEdge::kInclusiveWPlus1), (Window{4, 0}));
}

// The visibility rule with the resolved windows: HF semantics, W keys including the query.
TEST(Visibility, WindowCountsTheQuery) {
  const Window causal4 = causal_window(AttnKind::kSliding, 4);
  const Window sym4 = symmetrize_window(causal4, false);
  const int q = 10;
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(kv_visible(q, k, causal4), k <= q && q - k < 4) << k;
    EXPECT_EQ(kv_visible(q, k, sym4), q - k < 4 && k - q < 4) << k;
    EXPECT_EQ(kv_visible(q, k, Window{-1, 0}), k <= q) << k;
    EXPECT_TRUE(kv_visible(q, k, Window{-1, -1})) << k;
  }
  EXPECT_FALSE(kv_visible(q, kEmptySlot, Window{-1, -1}));
}

TEST(DefaultTargetLayerIds, SpecExamples) {
  using V = std::vector<int32_t>;
  EXPECT_EQ(default_target_layer_ids(36, 5), (V{1, 9, 17, 25, 33}));
  EXPECT_EQ(default_target_layer_ids(32, 5), (V{1, 8, 15, 22, 29}));
  EXPECT_EQ(default_target_layer_ids(64, 5), (V{1, 16, 31, 46, 61}));
  EXPECT_EQ(default_target_layer_ids(24, 5), (V{1, 6, 11, 16, 21}));
  EXPECT_EQ(default_target_layer_ids(36, 1), (V{18}));
  EXPECT_EQ(default_target_layer_ids(7, 1), (V{3}));
  // gemma-4-31B: 6 taps over 60 layers → 1, 12.2, 23.4, 34.6, 45.8, 57.
  EXPECT_EQ(default_target_layer_ids(60, 6), (V{1, 12, 23, 35, 46, 57}));
}

// Python round(): half to even. 7 layers, 3 taps: 1, 2.5, 4 → [1, 2, 4];
// 9 layers, 3 taps: 1, 3.5, 6 → [1, 4, 6]; 12 layers, 5 taps: 1, 3, 5, 7, 9;
// 6 layers, 5 taps: 1, 1.5, 2, 2.5, 3 → [1, 2, 2, 2, 3].
TEST(DefaultTargetLayerIds, HalfToEven) {
  using V = std::vector<int32_t>;
  EXPECT_EQ(default_target_layer_ids(7, 3), (V{1, 2, 4}));
  EXPECT_EQ(default_target_layer_ids(9, 3), (V{1, 4, 6}));
  EXPECT_EQ(default_target_layer_ids(12, 5), (V{1, 3, 5, 7, 9}));
  EXPECT_EQ(default_target_layer_ids(6, 5), (V{1, 2, 2, 2, 3}));
}

// ---- parse_model_config on drafter configs ----

nlohmann::json base_draft() {
  return nlohmann::json::parse(R"({
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
    "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "block_size": 8, "num_target_layers": 36,
    "dflash_config": {"mask_token_id": 511, "target_layer_ids": [0, 1]}
  })");
}

std::string parse_error(const nlohmann::json& j) {
  try {
    parse_model_config(j.dump());
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(ParseDraftConfig, ClassicDrafter) {
  const ModelConfig c = parse_model_config(base_draft().dump());
  EXPECT_EQ(c.family, Family::kDFlashDraft);
  ASSERT_TRUE(c.dflash.has_value());
  EXPECT_EQ(c.dflash->block_size, 8);
  EXPECT_EQ(c.dflash->mask_token_id, 511);
  EXPECT_EQ(c.dflash->target_layer_ids, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(c.layers.size(), 2u);
  for (const auto& l : c.layers) {
    EXPECT_EQ(l.attn, AttnKind::kFull);
    EXPECT_NE(l.window.right, 0);  // non-causal
    EXPECT_EQ(l.window, (Window{-1, -1}));
    EXPECT_FALSE(l.sinks);
    EXPECT_EQ(l.rope.n_rot, 16);
  }
}

TEST(ParseDraftConfig, DefaultsAndLookupOrder) {
  auto j = base_draft();
  j.erase("block_size");
  j["dflash_config"].erase("target_layer_ids");
  j["num_hidden_layers"] = 5;
  const ModelConfig c = parse_model_config(j.dump());
  EXPECT_EQ(c.dflash->block_size, 16);  // default
  EXPECT_EQ(c.dflash->target_layer_ids, (std::vector<int32_t>{1, 9, 17, 25, 33}));
  EXPECT_FALSE(c.dflash->has_explicit_target_layer_ids);
  // dflash_config wins over the top level.
  auto k = base_draft();
  k["dflash_config"]["block_size"] = 4;
  k["mask_token_id"] = 3;
  EXPECT_EQ(parse_model_config(k.dump()).dflash->block_size, 4);
  EXPECT_EQ(parse_model_config(k.dump()).dflash->mask_token_id, 511);
}

TEST(ParseDraftConfig, ImpossibleConfigsAreErrors) {
  {
    auto j = base_draft();
    j["dflash_config"]["use_swa"] = true;  // sliding, no window anywhere
    EXPECT_NE(parse_error(j), "");
  }
  {
    auto j = base_draft();
    j["layer_types"] = {"sliding_attention", "full_attention"};
    EXPECT_NE(parse_error(j), "");
    j["sliding_window"] = 4;
    EXPECT_EQ(parse_error(j), "");
  }
  {
    auto j = base_draft();
    j["layer_types"] = {"full_attention", "linear_attention"};
    EXPECT_NE(parse_error(j).find("linear_attention"), std::string::npos);
  }
  {
    auto j = base_draft();
    j["layer_types"] = {"full_attention"};  // 1 entry, 2 layers
    EXPECT_NE(parse_error(j), "");
  }
  for (int bad : {512, 100000, -1}) {
    auto j = base_draft();
    j["dflash_config"]["mask_token_id"] = bad;
    EXPECT_NE(parse_error(j).find("mask_token_id"), std::string::npos) << bad;
  }
  {
    auto j = base_draft();
    j["dflash_config"].erase("mask_token_id");
    EXPECT_NE(parse_error(j).find("mask_token_id"), std::string::npos);
  }
  for (int bad : {0, 1, 100000}) {
    auto j = base_draft();
    j["block_size"] = bad;
    EXPECT_NE(parse_error(j).find("block_size"), std::string::npos) << bad;
  }
  {
    auto j = base_draft();
    j["dflash_config"]["target_layer_ids"] = nlohmann::json::array();
    EXPECT_NE(parse_error(j), "");
    j["dflash_config"]["target_layer_ids"] = {0, -3};
    EXPECT_NE(parse_error(j), "");
  }
  {
    auto j = base_draft();
    j["dflash_config"].erase("target_layer_ids");
    j.erase("num_target_layers");
    EXPECT_NE(parse_error(j), "");
  }
  {
    auto j = base_draft();
    j["dflash_config"]["use_swa"] = true;
    j["dflash_config"]["swa_window_size"] = 0;
    EXPECT_NE(parse_error(j), "");
  }
}

TEST(ParseDraftConfig, MiMoKeys) {
  auto j = base_draft();
  j["partial_rotary_factor"] = 0.5;
  j["dflash_config"]["use_swa"] = true;
  j["dflash_config"]["swa_window_size"] = 4;
  j["dflash_config"]["attention_sink_bias"] = true;
  j["dflash_config"]["attention_value_scale"] = 0.612;
  j["dflash_config"]["backbone_rotary_base"] = 500000.0;
  const ModelConfig c = parse_model_config(j.dump());
  EXPECT_FLOAT_EQ(c.dflash->attention_value_scale, 0.612f);
  ASSERT_TRUE(c.dflash->backbone_rotary_base.has_value());
  EXPECT_FLOAT_EQ(*c.dflash->backbone_rotary_base, 500000.0f);
  for (const auto& l : c.layers) {
    EXPECT_TRUE(l.sinks);
    EXPECT_EQ(l.rope.n_rot, 8);
    EXPECT_EQ(l.window, (Window{3, 3}));
  }
  // Fallback flag name for sinks at the top level.
  auto k = base_draft();
  k["add_swa_attention_sink_bias"] = true;
  for (const auto& l : parse_model_config(k.dump()).layers) EXPECT_TRUE(l.sinks);
}

// The committed drafter fixtures resolve to the per-layer [window, causal] that the reference
// recorded in meta.json.
TEST(ParseDraftConfig, FixturesMatchReferenceResolution) {
  for (const char* name : {"zlab_full", "mimo_style", "mixed_swa", "dflash2_noncausal"}) {
    const std::string dir = test::fixture(std::string("dflash/") + name);
    const auto meta = test::read_json(dir + "/meta.json");
    const ModelConfig c = load_model_config(dir + "/draft");
    const auto& want = meta.at("resolved_layers_[window,causal]");
    ASSERT_EQ(c.layers.size(), want.size()) << name;
    for (size_t il = 0; il < want.size(); ++il) {
      const LayerSpec& l = c.layers[il];
      const bool causal = want[il][1].get<bool>();
      EXPECT_EQ(l.window.right == 0, causal) << name << " layer " << il;
      if (want[il][0].is_null()) {
        EXPECT_EQ(l.attn, AttnKind::kFull) << name << " layer " << il;
        EXPECT_EQ(l.window, (Window{-1, causal ? 0 : -1})) << name << " layer " << il;
      } else {
        const int w = want[il][0].get<int>();
        EXPECT_EQ(l.attn, AttnKind::kSliding) << name << " layer " << il;
        EXPECT_EQ(l.window, (Window{w - 1, causal ? 0 : w - 1})) << name << " layer " << il;
      }
      EXPECT_EQ(l.rope.n_rot, meta.at("rotary_dims").get<int>()) << name;
    }
    EXPECT_EQ(c.dflash->block_size, meta.at("block_size").get<int>()) << name;
    EXPECT_EQ(c.dflash->mask_token_id, meta.at("mask_token_id").get<int>()) << name;
  }
}

}  // namespace
}  // namespace dfl
