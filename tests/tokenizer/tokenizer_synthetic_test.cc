// Small hand-built tokenizer.json files (tests/fixtures/tokenizer/synthetic.golden.json) that
// exercise the options the real files leave unused, each checked against HF `tokenizers`.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace dfl {
namespace {

using json = nlohmann::json;

TEST(SyntheticTokenizers, MatchHF) {
  const json& cases = test::load_json(test::fixture_dir() + "/synthetic.golden.json");
  ASSERT_GE(cases.size(), 10u);
  size_t n_checked = 0;
  for (const json& c : cases) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const Tokenizer tok = Tokenizer::from_json_string(c["tokenizer"].dump());
    const json& texts = c["texts"];
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text = texts[i].get<std::string>();
      SCOPED_TRACE(json(text).dump());
      const auto want = c["encode"][i].get<std::vector<int32_t>>();
      EXPECT_EQ(tok.encode(text), want);
      EXPECT_EQ(tok.encode(text, true), c["encode_special"][i].get<std::vector<int32_t>>());
      EXPECT_EQ(tok.decode(want), c["decode"][i].get<std::string>());
      EXPECT_EQ(tok.decode(want, true), c["decode_skip"][i].get<std::string>());
      ++n_checked;
    }
  }
  std::printf("[ synthetic ] %zu tokenizers, %zu texts checked\n", cases.size(), n_checked);
}

// The same model written with legacy "a b" merges and with [a, b] pairs encodes identically.
TEST(SyntheticTokenizers, LegacyAndPairMergesAgree) {
  const json& cases = test::load_json(test::fixture_dir() + "/synthetic.golden.json");
  json pair_form;
  for (const json& c : cases) {
    if (c["name"] == "bytelevel_regex_added_flags") pair_form = c["tokenizer"];
  }
  ASSERT_FALSE(pair_form.is_null());
  json legacy = pair_form;
  legacy["model"]["merges"] = json::array();
  for (const json& m : pair_form["model"]["merges"]) {
    legacy["model"]["merges"].push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  const Tokenizer a = Tokenizer::from_json_string(pair_form.dump());
  const Tokenizer b = Tokenizer::from_json_string(legacy.dump());
  for (const char* text : {"hello the world", "tokenizing the token", " xyz xyz", "wordword"}) {
    EXPECT_EQ(a.encode(text), b.encode(text)) << text;
  }
}

}  // namespace
}  // namespace dfl
