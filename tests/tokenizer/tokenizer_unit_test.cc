// Unit tests: error handling of malformed tokenizer.json, UTF-8 helpers, regex rewriting.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/pattern.h"

namespace dfl {
namespace {

using json = nlohmann::json;

// A minimal valid byte-less BPE: vocab a, b, ab; one merge.
json minimal() {
  return json::parse(R"({
    "added_tokens": [{"id": 3, "content": "<s>", "special": true, "normalized": false}],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}})");
}

// Expects dfl::Error whose message is one line containing `needle`.
void expect_error_text(const std::string& text, const std::string& needle) {
  try {
    Tokenizer::from_json_string(text);
    ADD_FAILURE() << "no error for: " << text.substr(0, 200);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
  }
}

void expect_error(const json& j, const std::string& needle) { expect_error_text(j.dump(), needle); }

TEST(TokenizerErrors, MinimalIsValid) {
  const Tokenizer t = Tokenizer::from_json_string(minimal().dump());
  EXPECT_EQ(t.encode("abab<s>a"), (std::vector<int32_t>{2, 2, 3, 0}));
  EXPECT_EQ(t.decode({2, 3, 0}), "ab <s> a");  // no decoder: pieces joined by spaces
  EXPECT_EQ(t.vocab_size(), 4);
  EXPECT_TRUE(t.is_special(3));
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{2}));  // no unk token: 'c' is dropped
}

TEST(TokenizerErrors, MalformedJson) {
  expect_error_text("", "not valid JSON");
  expect_error_text("{", "not valid JSON");
  expect_error_text("not json", "not valid JSON");
  expect_error_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [}}", "not valid JSON");
  expect_error_text(std::string("{\"model\": \"\xFF\"}"), "not valid JSON");
  expect_error_text(std::string(100000, '['), "");
  expect_error_text("[]", "top level");
}

TEST(TokenizerErrors, MissingOrUnsupportedModel) {
  expect_error_text("{}", "missing \"model\"");
  json j = minimal();
  j["model"] = 5;
  expect_error(j, "missing \"model\"");
  j = minimal();
  j["model"]["type"] = "Unigram";
  expect_error(j, "unsupported model type 'Unigram'");
  j["model"]["type"] = "WordPiece";
  expect_error(j, "unsupported model type 'WordPiece'");
  j = minimal();
  j["model"].erase("vocab");
  expect_error(j, "model.vocab");
  j = minimal();
  j["model"].erase("merges");
  expect_error(j, "model.merges");
  j = minimal();
  j["model"]["dropout"] = 0.1;
  expect_error(j, "dropout");
}

TEST(TokenizerErrors, BadVocabAndMerges) {
  json j = minimal();
  j["model"]["vocab"]["c"] = "seven";
  expect_error(j, "non-integer id");
  j = minimal();
  j["model"]["vocab"]["c"] = -4;
  expect_error(j, "out of range");
  j = minimal();
  j["model"]["merges"] = json::array({json::array({"a", "zz"})});
  expect_error(j, "not in the vocab");
  j = minimal();
  j["model"]["merges"] = json::array({"b a"});  // "ba" is not in the vocab
  expect_error(j, "'ba' which is not in the vocab");
  j = minimal();
  j["model"]["merges"] = json::array({"a b c"});
  expect_error(j, "not of the form");
  j = minimal();
  j["model"]["merges"] = json::array({json::array({"a"})});
  expect_error(j, "pair of strings");
  j = minimal();
  j["model"]["merges"] = json::array({3});
  expect_error(j, "neither");
  j = minimal();
  j["model"]["unk_token"] = "<unk>";
  expect_error(j, "unk_token");
}

TEST(TokenizerErrors, BadComponents) {
  json j = minimal();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error(j, "unsupported normalizer type 'BertNormalizer'");
  j = minimal();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j, "unsupported pre_tokenizer type 'Whitespace'");
  j = minimal();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(j, "cannot compile regex");
  j = minimal();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  expect_error(j, "unknown Split behavior");
  j = minimal();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j, "unsupported decoder type 'WordPiece'");
  j = minimal();
  j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", json::array({{{"SpecialToken", {{"id", "<x>"}}}}})}};
  expect_error(j, "'<x>'");
  j = minimal();
  j["added_tokens"] = json::array({{{"id", 9}}});
  expect_error(j, "no string \"content\"");
  j = minimal();
  j["added_tokens"] = json::array({{{"id", -1}, {"content", "x"}}});
  expect_error(j, "non-negative integer");
  j = minimal();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Glob", "*"}}}, {"content", "x"}};
  expect_error(j, "pattern must be");
  j = minimal();
  j["model"]["fuse_unk"] = "yes";
  expect_error(j, "fuse_unk");
}

TEST(TokenizerErrors, MissingFile) {
  try {
    Tokenizer::from_file("/nonexistent/tokenizer.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos);
  }
}

TEST(Utf8, LossyFollowsRustMaximalSubparts) {
  EXPECT_EQ(utf8::lossy("abc"), "abc");
  EXPECT_EQ(utf8::lossy("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  // Truncated 3-byte sequence: one U+FFFD for the maximal subpart.
  EXPECT_EQ(utf8::lossy("\xE4\xBD"), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8::lossy("\xE4\xBD" "a"), "\xEF\xBF\xBD" "a");
  // Surrogate encoding ED A0 80: ED alone is a maximal subpart, then A0 and 80 separately.
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  // Overlong C0 80: two replacements.
  EXPECT_EQ(utf8::lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8::lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_TRUE(utf8::is_valid("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(utf8::is_valid(std::string_view("\xE0\x80\x80", 3)));  // overlong
}

TEST(Pattern, WhitespaceRewrite) {
  EXPECT_EQ(tok::rewrite_whitespace_classes("a"), "a");
  EXPECT_NE(tok::rewrite_whitespace_classes("\\s+").find("\\x{3000}"), std::string::npos);
  EXPECT_EQ(tok::rewrite_whitespace_classes("\\Q\\s\\E"), "\\Q\\s\\E");
  const tok::Pattern p = tok::Pattern::regex("\\s+");
  // U+180E is not White_Space (Oniguruma agrees); U+0085 and U+3000 are.
  EXPECT_TRUE(p.find_all("a\xE1\xA0\x8E" "b").empty());
  EXPECT_EQ(p.find_all("a\xC2\x85\xE3\x80\x80" "b").size(), 1u);
  const tok::Pattern q = tok::Pattern::regex("[^\\s\\p{L}]+");
  EXPECT_EQ(q.find_all("ab 12\xE1\xA0\x8E").size(), 1u);
  // Empty matches: one per position, none glued to the previous match.
  const tok::Pattern e = tok::Pattern::regex("a*");
  EXPECT_EQ(e.find_all("baa"), (std::vector<tok::Span>{{0, 0}, {1, 3}}));
}

}  // namespace
}  // namespace dfl
