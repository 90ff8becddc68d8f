// Byte-exact comparison with goldens from Python jinja2 / transformers
// (tools/ref/make_template_goldens.py → tests/fixtures/chat/template_goldens.json).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/jinja.h"
#include "core/error.h"
#include "core/mmap.h"

namespace dfl {
namespace {

using ojson = nlohmann::ordered_json;

std::string repo_path(const std::string& rel) {
  const char* root = std::getenv("DFL_ROOT");
  return root ? std::string(root) + "/" + rel : rel;
}

std::string shared_dir() {
  if (const char* s = std::getenv("DFL_SHARED")) return s;
  return repo_path("../shared");
}

const ojson& goldens() {
  static const ojson doc = [] {
    std::string path = repo_path("tests/fixtures/chat/template_goldens.json");
    if (!file_exists(path)) return ojson::object();
    return ojson::parse(read_text_file(path));
  }();
  return doc;
}

std::vector<int> indices(const char* section) {
  std::vector<int> out;
  if (goldens().contains(section))
    for (size_t i = 0; i < goldens()[section].size(); ++i) out.push_back(static_cast<int>(i));
  return out;
}

std::string case_name(const char* section, int i) {
  std::string n = goldens()[section][i]["name"].get<std::string>();
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

TEST(ChatGoldens, FixtureLoaded) {
  ASSERT_TRUE(goldens().contains("conversations"))
      << "missing tests/fixtures/chat/template_goldens.json";
  EXPECT_GE(goldens()["conversations"].size(), 30u);
  EXPECT_GE(goldens()["snippets"].size(), 50u);
}

// The template to use for a conversation case: the real tokenizer_config.json when the shared
// data is present (and it must hold the same template as the fixture), else the fixture's copy.
const ChatTemplate& template_for(const std::string& key) {
  static std::map<std::string, ChatTemplate> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const ojson& fx = goldens()["templates"][key];
  std::string path = shared_dir() + "/data/tokenizers/" + key + "/tokenizer_config.json";
  ChatTemplate t;
  if (file_exists(path)) {
    t = ChatTemplate::from_tokenizer_config(path);
    EXPECT_EQ(t.sources.at(0).second, fx["source"].get<std::string>()) << path;
  } else {
    ojson cfg = fx["special_tokens"];
    cfg["chat_template"] = fx["source"];
    t = ChatTemplate::from_config_json(cfg);
  }
  return cache.emplace(key, std::move(t)).first->second;
}

class ConversationGolden : public ::testing::TestWithParam<int> {};

TEST_P(ConversationGolden, MatchesTransformers) {
  const ojson& c = goldens()["conversations"][GetParam()];
  SCOPED_TRACE(c["name"].get<std::string>());
  const ChatTemplate& t = template_for(c["template"].get<std::string>());
  ChatOptions opt;
  opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  opt.tools = c["tools"];
  opt.extra = c["extra"];
  if (c.contains("expected")) {
    EXPECT_EQ(render_chat(t, c["messages"], opt), c["expected"].get<std::string>());
  } else {
    try {
      render_chat(t, c["messages"], opt);
      ADD_FAILURE() << "expected an error: " << c["error"];
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos)
          << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Chat, ConversationGolden, ::testing::ValuesIn(indices("conversations")),
                         [](const auto& info) { return case_name("conversations", info.param); });

class SnippetGolden : public ::testing::TestWithParam<int> {};

TEST_P(SnippetGolden, MatchesJinja2) {
  const ojson& c = goldens()["snippets"][GetParam()];
  const std::string src = c["template"].get<std::string>();
  SCOPED_TRACE(src);
  jinja::Value ctx = jinja::Value::from_json(c["context"]);
  if (c.contains("expected")) {
    EXPECT_EQ(jinja::Template(src).render(ctx), c["expected"].get<std::string>());
  } else {
    EXPECT_THROW(jinja::Template(src).render(ctx), Error) << c["error"];
  }
}

INSTANTIATE_TEST_SUITE_P(Jinja, SnippetGolden, ::testing::ValuesIn(indices("snippets")),
                         [](const auto& info) { return case_name("snippets", info.param); });

}  // namespace
}  // namespace dfl
