// The real Gemma-3-270M against llama.cpp on the same GGUF (tests/fixtures/gguf/
// gemma3_270m_llamacpp.json, written by tools/ref/make_llamacpp_oracle.py from a llama.cpp build
// outside the repo):
//   - BOS: llama-simple prints "<bos>" once before the prompt, and our encode(text, special)
//     = [bos] + llama.cpp's plain tokenization = the HF ids of the transformers oracle;
//   - tokenization of the 2,249-line corpus: our GGUF tokenizer = llama_tokenize, line by line,
//     except lines holding a literal U+2581 "▁" (25 lines): llama.cpp's SentencePiece path
//     splits such a character into byte-level pieces where HF `tokenizers` (and we) read it as
//     the space symbol it is in the vocabulary; every such line must equal HF's ids (2 of them
//     also hold <image_soft_token>, whose HF id is beyond the GGUF vocabulary);
//   - 32-token greedy continuations of the 20 prompts: identical, or explained token by token —
//     at the first divergence both picks are within kTieGap of each other in OUR fp32-accurate
//     logits (llama.cpp quantizes activations to one int8 per block: its logits move by up to
//     ~0.65 on this model, measured with our kInt8 mode, which is the same scheme);
//   - llama.cpp's own binary (llama-simple) printed the text of the driver's greedy ids.
// Skipped when the model file is absent (tools/models/gemma3_270m.sh fetches it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "common/golden.h"
#include "common/models.h"
#include "core/mmap.h"
#include "engine/engine.h"
#include "engine/model_assets.h"
#include "kernels/ops.h"
#include "tokenizer/tokenizer.h"

namespace dfl {
namespace {

constexpr double kTieGap = 1.0;

std::string model_path() {
  const char* c = std::getenv("DFLASH_CACHE");
  const char* home = std::getenv("HOME");
  const std::string cache = c && *c ? c : std::string(home ? home : "") + "/.cache/dflash";
  return cache + "/gemma-3-270m-q4_k_m.gguf";
}

class Gemma3LlamaCpp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!file_exists(model_path()))
      GTEST_SKIP() << "real model absent: run tools/models/gemma3_270m.sh (fetches it into "
                   << model_path() << ")";
    oracle_ = test::read_json(test::fixture("gguf/gemma3_270m_llamacpp.json"));
  }
  nlohmann::json oracle_;
};

TEST_F(Gemma3LlamaCpp, BosAndCorpusTokenizationMatchLlamaCpp) {
  const ModelAssets assets = ModelAssets::load(model_path());
  ASSERT_TRUE(assets.tokenizer.has_value());
  const Tokenizer& tok = *assets.tokenizer;
  for (const auto& p : oracle_["prompts"]) {
    const std::string text = p["text"].get<std::string>();
    auto want = p["plain_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text, false), want) << text;
    want.insert(want.begin(), 2);  // <bos>
    EXPECT_EQ(tok.encode(text, true), want) << text;
    EXPECT_EQ(p["ids"].get<std::vector<int32_t>>(), want) << "the HF oracle's ids";
    EXPECT_EQ(p["simple_prefix"].get<std::string>(), "<bos>") << "llama-simple's prompt print";
  }
  const auto corpus = test::read_json(test::fixture("tokenizer/corpus.json"));
  const auto hf = test::read_json(test::fixture("tokenizer/gemma3.golden.json"));
  const auto& ids = oracle_["corpus"];
  ASSERT_EQ(corpus.size(), ids.size());
  size_t bad = 0, explained = 0, tokens = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto want = ids[i].get<std::vector<int32_t>>();
    const std::string line = corpus[i].get<std::string>();
    tokens += want.size();
    const auto got = tok.encode(line, false);
    if (got == want) continue;
    // (HF's ids of a line with <image_soft_token> hold id 262144, beyond the GGUF vocabulary:
    // not comparable, see GgufTokenizer.)
    if (line.find("\xE2\x96\x81") != std::string::npos &&
        (got == hf["encode"][i].get<std::vector<int32_t>>() ||
         line.find("<image_soft_token>") != std::string::npos)) {
      ++explained;  // literal U+2581: llama.cpp differs from HF tokenizers, we follow HF
      continue;
    }
    if (++bad <= 5)
      ADD_FAILURE() << "line " << i << " " << corpus[i].dump() << "\n ours  " << nlohmann::json(got).dump()
                    << "\n llama.cpp " << nlohmann::json(want).dump();
  }
  std::printf("[gemma3-270m vs llama.cpp] corpus: %zu lines, %zu tokens: %zu lines differ, %zu more "
              "explained (a literal U+2581, where we equal HF and llama.cpp does not)\n",
              corpus.size(), tokens, bad, explained);
  EXPECT_EQ(bad, 0u);
  EXPECT_LE(explained, 25u);
}

TEST_F(Gemma3LlamaCpp, GreedyContinuationsIdenticalOrExplained) {
  const auto& prompts = oracle_["prompts"];
  const ModelAssets assets = ModelAssets::load(model_path());
  auto pool = test::make_pool();
  LoadOptions lo;
  lo.max_context = 512;
  auto model = load_causal_lm(model_path(), lo, *pool);
  int same = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto ids = prompts[i]["ids"].get<std::vector<int32_t>>();
    const auto theirs = prompts[i]["greedy"].get<std::vector<int32_t>>();
    // llama.cpp's binary printed the pieces of these ids.
    EXPECT_EQ(assets.tokenizer->decode(theirs), prompts[i]["simple_text"].get<std::string>())
        << "prompt " << i << ": llama-simple vs the driver";
    // Ours, teacher-forced along llama.cpp's continuation: one forward, argmax per row.
    std::vector<int32_t> seq = ids;
    seq.insert(seq.end(), theirs.begin(), theirs.end() - 1);
    model->kv().clear(0);
    const ForwardOut out = test::run_forward(*model, seq, LogitsMode::kAll);
    const int64_t V = model->config().vocab_size;
    size_t k = 0;
    for (; k < theirs.size(); ++k) {
      const float* row = out.logits.data() + (ids.size() - 1 + k) * V;
      const int32_t ours = static_cast<int32_t>(ops::argmax(row, V));
      if (ours == theirs[k]) continue;
      const double gap = row[ours] - row[theirs[k]];
      std::printf("[gemma3-270m vs llama.cpp] prompt %zu: first difference at step %zu: ours %d, "
                  "llama.cpp %d, our logit gap %.4f\n", i, k, ours, theirs[k], gap);
      EXPECT_LE(gap, kTieGap) << "prompt " << i << " step " << k << ": not a near tie";
      break;
    }
    same += k == theirs.size();
  }
  // (transformers on the same file agrees with llama.cpp on 8 of these 20, with us on 20: the
  // differences are llama.cpp's int8 activation rounding at near ties.)
  std::printf("[gemma3-270m vs llama.cpp] greedy 32 tokens identical on %d of %zu prompts, the "
              "others explained\n", same, prompts.size());
}

}  // namespace
}  // namespace dfl
