// Qwen3 / Llama GGUF dialects: tests/fixtures/gguf_dialects/<name>.<type>.gguf are the tiny HF
// fixtures converted by llama.cpp's own convert_hf_to_gguf.py
// (tools/ref/make_gguf_dialect_fixtures.py). Each GGUF model is run on the HF golden prompt +
// greedy continuation (teacher-forced) and compared with the transformers goldens of the folder
// it came from, and with transformers loading the same GGUF (<name>.logits.safetensors: its own
// dequantizer and q/k un-permutation, fp32):
//   - config: the GGUF metadata gives the HF folder's config (sizes, heads, RoPE, eps, tying);
//   - logits vs transformers-on-the-GGUF (same dequantized weights): f32 / f16 ≤ 1e-4 (fp32 math
//     in both, observed ~5e-6); q8_0 ≤ 2e-3 with the default int8x2 activations of the GGML
//     matmul (ops.h: ~15-bit activation blocks, observed 2e-4..7e-4 on these O(5) logits);
//   - logits vs the HF folder's fp32 goldens within the error of the stored type (below);
//   - greedy: our argmax = transformers-on-the-GGUF's at every step whose top-2 gap > 1e-3,
//     and = the HF folder's greedy tokens at every step for f32 / f16 (q8_0 may flip a tie);
//   - the GGUF vocabulary (`gpt2` BPE) encodes like the folder's tokenizer.json.
// The `llama` files also check that the converter's q/k row permutation is undone: without it
// the f32 logits differ by O(1).
#include <gtest/gtest.h>

#include <algorithm>

#include "common/golden.h"
#include "common/models.h"
#include "engine/gguf_tokenizer.h"
#include "io/gguf.h"
#include "model/config.h"
#include "model/gguf_dialect.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace dfl {
namespace {

using test::Golden;

struct Case {
  std::string gguf;    // name in tests/fixtures/gguf_dialects (without .<type>.gguf)
  std::string folder;  // the HF fixture it was converted from
};

constexpr double kOracleTol = 1e-4;
constexpr double kOracleTolInt8x2 = 2e-3;

// Logits vs the HF folder (logits are |x| ≤ ~5): the weights' own rounding. f32: none (~4e-6
// observed, summation order). f16: weights rounded to 11 bits → 4e-3..8e-3 observed. q8_0:
// 8-bit blocks of 32 with an f16 scale (relative error up to 1/254 per weight) → 0.03..0.16
// observed (transformers on the same file shows the same figures).
double folder_tolerance(const std::string& type) {
  if (type == "f32") return 1e-4;
  if (type == "f16") return 2e-2;
  return 0.3;
}

class GgufDialect : public ::testing::TestWithParam<std::tuple<Case, std::string>> {};

TEST_P(GgufDialect, MatchesTheHfFolderGoldens) {
  const auto& [c, type] = GetParam();
  const std::string path = test::fixture("gguf_dialects/" + c.gguf + "." + type + ".gguf");
  const std::string dir = test::fixture(c.folder);
  const ModelConfig hf = load_model_config(dir);
  const ModelConfig gg = load_model_config(path);
  EXPECT_EQ(gg.family, hf.family);
  EXPECT_EQ(gg.hidden_size, hf.hidden_size);
  EXPECT_EQ(gg.n_layers, hf.n_layers);
  EXPECT_EQ(gg.vocab_size, hf.vocab_size);
  EXPECT_EQ(gg.intermediate_size, hf.intermediate_size);
  EXPECT_EQ(gg.tie_word_embeddings, hf.tie_word_embeddings);
  EXPECT_FLOAT_EQ(gg.rms_norm_eps, hf.rms_norm_eps);
  ASSERT_EQ(gg.layers.size(), hf.layers.size());
  for (size_t i = 0; i < gg.layers.size(); ++i) {
    EXPECT_EQ(gg.layers[i].n_heads, hf.layers[i].n_heads);
    EXPECT_EQ(gg.layers[i].n_kv_heads, hf.layers[i].n_kv_heads);
    EXPECT_EQ(gg.layers[i].head_dim, hf.layers[i].head_dim);
    EXPECT_EQ(gg.layers[i].rope, hf.layers[i].rope) << "layer " << i;
  }

  Golden g(dir + "/golden.safetensors");
  auto pool = test::make_pool();
  auto model = load_causal_lm(path, LoadOptions{}, *pool);
  const int32_t V = model->config().vocab_size;
  auto seq = g.i32("prompt_ids");
  const size_t n = seq.size();
  const auto greedy = g.i32("greedy_ids");
  seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
  const ForwardOut out = test::run_forward(*model, seq, LogitsMode::kAll);

  const Golden oracle(test::fixture("gguf_dialects/" + c.gguf + ".logits.safetensors"));
  const auto tf = oracle.f32(type);  // [seq, V]
  ASSERT_EQ(tf.size(), seq.size() * size_t(V));
  const double d_oracle = test::max_abs_diff(out.logits, tf);
  EXPECT_LE(d_oracle, type == "q8_0" ? kOracleTolInt8x2 : kOracleTol) << type;

  const double tol = folder_tolerance(type);
  const auto ref = g.f32("logits");  // [n, V]: the prompt rows
  const double d_prompt = test::max_abs_diff(out.logits.data(), ref.data(), n * size_t(V));
  const auto ref_greedy = g.f32("greedy_logits");  // [greedy, V]: row i predicts greedy[i]
  const double d_greedy = test::max_abs_diff(out.logits.data() + (n - 1) * V, ref_greedy.data(),
                                             greedy.size() * size_t(V));
  EXPECT_LE(d_prompt, tol) << type;
  EXPECT_LE(d_greedy, tol) << type;
  std::printf("[%s.%s] max |logit diff| vs transformers-on-GGUF %.3g; vs HF folder: prompt %.3g, "
              "greedy rows %.3g (tolerance %.0e)\n",
              c.gguf.c_str(), type.c_str(), d_oracle, d_prompt, d_greedy, tol);

  const auto picks = test::argmax_rows(out.logits.data(), seq.size(), V);
  const auto tf_picks = test::argmax_rows(tf.data(), seq.size(), V);
  int checked = 0;
  for (size_t p = 0; p < seq.size(); ++p) {
    std::vector<float> row(tf.begin() + p * V, tf.begin() + (p + 1) * V);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    if (row[0] - row[1] <= 1e-3) continue;
    ++checked;
    EXPECT_EQ(picks[p], tf_picks[p]) << type << " position " << p;
  }
  EXPECT_GE(checked, int(seq.size()) * 3 / 4);
  if (type != "q8_0")
    for (size_t i = 0; i < greedy.size(); ++i)
      EXPECT_EQ(picks[n - 1 + i], greedy[i]) << type << " greedy step " << i;

  const Tokenizer hf_tok = Tokenizer::from_file(dir + "/tokenizer.json");
  const Tokenizer gg_tok = gguf_tokenizer(GgufFile(path));
  for (const char* text : {"The quick brown fox jumps over the lazy dog.",
                           "Speculative decoding: 12345 tokens, <|im_start|>user\nhi<|im_end|>",
                           "  leading spaces, tabs\tand\nnew lines — ünïcödé 日本語"})
    EXPECT_EQ(gg_tok.encode(text), hf_tok.encode(text)) << text;
}

const Case kCases[] = {{"qwen3_tied_gqa2", "qwen3/tied_gqa2"},
                       {"qwen3_untied_gqa1", "qwen3/untied_gqa1"},
                       {"llama_tied", "llama/tied"}};

INSTANTIATE_TEST_SUITE_P(All, GgufDialect,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values("f32", "f16", "q8_0")),
                         [](const auto& info) {
                           return std::get<0>(info.param).gguf + "_" + std::get<1>(info.param);
                         });

// The q/k permutation of the `llama` converter, undone: HF row s·D/2 + j of each head is stored
// at row 2j + s (D = 4 here; two heads).
TEST(GgufDialectRowOrder, LlamaQkPermutationInverse) {
  const GgufFile f(test::fixture("gguf_dialects/llama_tied.f32.gguf"));
  EXPECT_TRUE(llama_qk_row_order(f, "blk.0.attn_v.weight", 48).empty());
  EXPECT_TRUE(llama_qk_row_order(f, "token_embd.weight", 512).empty());
  const auto q = llama_qk_row_order(f, "blk.0.attn_q.weight", 48);  // 4 heads × 12
  ASSERT_EQ(q.size(), 48u);
  const std::vector<int64_t> head0 = {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11};
  EXPECT_EQ(std::vector<int64_t>(q.begin(), q.begin() + 12), head0);
  EXPECT_EQ(q[12], 12);
  EXPECT_EQ(q[18], 13);
  const auto k = llama_qk_row_order(f, "blk.1.attn_k.weight", 24);  // 2 kv heads × 12
  ASSERT_EQ(k.size(), 24u);
  EXPECT_EQ(k[23], 23);
  EXPECT_EQ(k[17], 22);
}

}  // namespace
}  // namespace dfl
