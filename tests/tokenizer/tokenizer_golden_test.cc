// Real tokenizers (Qwen3 byte-level BPE, Gemma 3 byte-fallback BPE) against HF `tokenizers`
// goldens over the whole corpus (tests/fixtures/tokenizer, made by
// tools/ref/make_tokenizer_goldens.py). Skipped when ../shared/data/tokenizers is absent.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace dfl {
namespace {

using json = nlohmann::json;

class RealTokenizer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tok_ = test::real_tokenizer(GetParam());
    if (tok_ == nullptr) GTEST_SKIP() << "missing " << test::real_tokenizer_path(GetParam());
    corpus_ = &test::load_json(test::fixture_dir() + "/corpus.json");
    gold_ = &test::load_json(test::fixture_dir() + "/" + GetParam() + ".golden.json");
  }
  std::string line(size_t i) const { return (*corpus_)[i].get<std::string>(); }
  std::vector<int32_t> ids(const char* key, size_t i) const {
    return (*gold_)[key][i].get<std::vector<int32_t>>();
  }
  // Expected decode of line i: stored when it differs from the line itself.
  std::string want_decode(size_t i) const {
    const json& d = (*gold_)["decode"][i];
    return d.is_null() ? line(i) : d.get<std::string>();
  }

  const Tokenizer* tok_ = nullptr;
  const json* corpus_ = nullptr;
  const json* gold_ = nullptr;
};

TEST_P(RealTokenizer, EncodeCorpusMatchesHF) {
  ASSERT_EQ(corpus_->size(), (*gold_)["encode"].size());
  ASSERT_GE(corpus_->size(), 2000u);
  size_t n_bad = 0, n_tokens = 0;
  for (size_t i = 0; i < corpus_->size(); ++i) {
    const std::vector<int32_t> got = tok_->encode(line(i));
    const std::vector<int32_t> want = ids("encode", i);
    n_tokens += want.size();
    if (got != want && ++n_bad <= 5) {
      ADD_FAILURE() << GetParam() << " line " << i << " " << (*corpus_)[i].dump()
                    << "\n got " << json(got).dump() << "\nwant " << json(want).dump();
    }
  }
  EXPECT_EQ(n_bad, 0u) << "of " << corpus_->size() << " lines";
  std::printf("[ %s ] %zu lines, %zu tokens compared, %zu mismatches\n", GetParam().c_str(),
              corpus_->size(), n_tokens, n_bad);

  const json& special = (*gold_)["encode_special"];
  for (size_t i = 0; i < special.size(); ++i) {
    EXPECT_EQ(tok_->encode(line(i), /*add_special_tokens=*/true), ids("encode_special", i))
        << "line " << i;
  }
}

TEST_P(RealTokenizer, DecodeMatchesHF) {
  size_t n_bad = 0;
  for (size_t i = 0; i < corpus_->size(); ++i) {
    const std::vector<int32_t> v = ids("encode", i);
    const std::string want = want_decode(i);
    const json& skip = (*gold_)["decode_skip"][i];
    const std::string want_skip = skip.is_null() ? want : skip.get<std::string>();
    const bool ok = tok_->decode(v) == want && tok_->decode(v, true) == want_skip;
    if (!ok && ++n_bad <= 5) ADD_FAILURE() << "line " << i << " " << (*corpus_)[i].dump();
  }
  EXPECT_EQ(n_bad, 0u);

  const json& rnd = (*gold_)["random_ids"];
  for (size_t i = 0; i < rnd.size(); ++i) {
    const std::vector<int32_t> v = ids("random_ids", i);
    EXPECT_EQ(tok_->decode(v), (*gold_)["random_decode"][i].get<std::string>()) << "random " << i;
    EXPECT_EQ(tok_->decode(v, true), (*gold_)["random_decode_skip"][i].get<std::string>())
        << "random " << i;
  }

  for (const auto& [key, piece] : (*gold_)["pieces"].items()) {
    const int32_t id = std::stoi(key);
    EXPECT_EQ(tok_->id_to_piece(id), piece.get<std::string>()) << "id " << id;
    EXPECT_EQ(tok_->id_to_piece(tok_->piece_to_id(piece.get<std::string>())), piece.get<std::string>());
  }
  EXPECT_EQ(tok_->vocab_size(), (*gold_)["vocab_size_hf"].get<int32_t>());
  EXPECT_EQ(tok_->id_to_piece(tok_->vocab_size() + 5), "");
  EXPECT_EQ(tok_->piece_to_id("definitely not a token \x01"), -1);
}

// Feeds ids one at a time: every chunk is valid UTF-8 and the chunks add up to decode(ids).
void expect_stream_equals_decode(const Tokenizer& tok, const std::vector<int32_t>& v, bool skip,
                                 const std::string& what) {
  StreamDecoder stream(tok, skip);
  std::string all;
  for (int32_t id : v) {
    const std::string chunk = stream.push(id);
    ASSERT_TRUE(utf8::is_valid(chunk)) << what;
    all += chunk;
  }
  const std::string tail = stream.flush();
  ASSERT_TRUE(utf8::is_valid(tail)) << what;
  all += tail;
  ASSERT_EQ(all, tok.decode(v, skip)) << what;
}

TEST_P(RealTokenizer, StreamingDecodeMatchesFullDecode) {
  std::vector<int32_t> everything;
  for (size_t i = 0; i < corpus_->size(); ++i) {
    const std::vector<int32_t> v = ids("encode", i);
    expect_stream_equals_decode(*tok_, v, false, "line " + std::to_string(i));
    everything.insert(everything.end(), v.begin(), v.end());
  }
  expect_stream_equals_decode(*tok_, everything, false, "whole corpus");
  expect_stream_equals_decode(*tok_, everything, true, "whole corpus, skip special");

  // Random ids (lone bytes, specials, unknown ids): chunks stay valid UTF-8; for byte-level
  // vocabularies they also add up to the full decode.
  const json& rnd = (*gold_)["random_ids"];
  for (size_t i = 0; i < rnd.size(); ++i) {
    const std::vector<int32_t> v = ids("random_ids", i);
    StreamDecoder stream(*tok_);
    std::string all;
    for (int32_t id : v) {
      const std::string chunk = stream.push(id);
      ASSERT_TRUE(utf8::is_valid(chunk)) << "random " << i;
      all += chunk;
    }
    all += stream.flush();
    ASSERT_TRUE(utf8::is_valid(all));
    if (GetParam() == "qwen3") {
      EXPECT_EQ(all, tok_->decode(v)) << "random " << i;
    }
  }
}

TEST_P(RealTokenizer, StreamHoldsBackSplitCharacters) {
  // An emoji spread over several byte tokens must come out whole, in one chunk.
  const std::string text = "ok 👩‍💻 🇯🇵 中文";
  const std::vector<int32_t> v = tok_->encode(text);
  StreamDecoder stream(*tok_);
  std::string all;
  for (int32_t id : v) {
    const std::string c = stream.push(id);
    EXPECT_TRUE(utf8::is_valid(c));
    all += c;
  }
  all += stream.flush();
  EXPECT_EQ(all, text);
  // An incomplete character at the end is held back and flushed as U+FFFD.
  const std::vector<int32_t> head = tok_->encode("\xF0\x9F\x98\x80");
  if (head.size() >= 2) {
    StreamDecoder s2(*tok_);
    EXPECT_EQ(s2.push(head[0]), "");
    EXPECT_TRUE(utf8::is_valid(s2.flush()));
  }
}

TEST_P(RealTokenizer, ConcurrentEncodeIsConsistent) {
  // encode() is const and shares one BPE cache: threads must see the same results.
  std::vector<std::thread> threads;
  std::vector<size_t> n_bad(4, 0);
  for (size_t t = 0; t < n_bad.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < corpus_->size(); i += 2) {
        if (tok_->encode(line(i)) != ids("encode", i)) ++n_bad[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t b : n_bad) EXPECT_EQ(b, 0u);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RealTokenizer, ::testing::Values("qwen3", "gemma3"),
                         [](const auto& info) { return info.param; });

TEST(RealTokenizerApi, QwenSpecialsAndGemmaBos) {
  const Tokenizer* q = test::real_tokenizer("qwen3");
  const Tokenizer* g = test::real_tokenizer("gemma3");
  if (q == nullptr || g == nullptr) GTEST_SKIP() << "shared tokenizers missing";
  EXPECT_EQ(q->piece_to_id("<|im_start|>"), 151644);
  EXPECT_TRUE(q->is_special(151644));
  EXPECT_FALSE(q->is_special(151667));  // <think> is an added token but not special
  EXPECT_EQ(q->encode("<|im_start|>user\nhi<|im_end|>"),
            (std::vector<int32_t>{151644, q->piece_to_id("user"), q->piece_to_id("Ċ"),
                                  q->piece_to_id("hi"), 151645}));
  EXPECT_EQ(q->decode({151644, 872}, /*skip_special_tokens=*/true), q->decode({872}));
  const std::vector<int32_t> with_bos = g->encode("Hello", /*add_special_tokens=*/true);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos[0], 2);
  EXPECT_EQ(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()), g->encode("Hello"));
  EXPECT_TRUE(g->is_special(2));
  EXPECT_EQ(g->id_to_piece(2), "<bos>");
  // Invalid UTF-8 input is encoded as if ill-formed bytes were U+FFFD.
  EXPECT_EQ(q->encode("a\xFF" "b"), q->encode("a\xEF\xBF\xBD" "b"));
}

}  // namespace
}  // namespace dfl
