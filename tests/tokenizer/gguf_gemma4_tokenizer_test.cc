// llama.cpp's `gemma4` GGUF tokenizer (tokenizer.ggml.model "gemma4") against llama.cpp itself:
// tests/fixtures/gguf/gemma4_tokenizer_llamacpp.json (tools/ref/make_gemma4_tokenizer_oracle.py)
// holds llama.cpp's ids / ids with BOS / pieces text / eog ids for
//  * a vocab-only GGUF built from the real Gemma 3 tokenizer the way llama.cpp's converter writes
//    a Gemma 4 vocabulary, on the 2,249-line corpus. The GGUF (~15 MB) is not committed: it is
//    rebuilt here from ../shared/data/tokenizers/gemma3/tokenizer.json and the recorded token
//    types, and checked against the recorded hashes of the lists llama.cpp read (skipped when the
//    shared file is absent);
//  * three tiny hand-made vocabularies (newline runs, "</s>" / "<|tool_response>", byte fallback,
//    forced BOS; model gpt2 with pre gemma4), rebuilt from the lists in the fixture (always run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "engine/gguf_tokenizer.h"
#include "../io/gguf_builder.h"
#include "../io/st_builder.h"
#include "test_util.h"

namespace dfl {
namespace {

using json = nlohmann::json;

const json& oracle() {
  const char* root = std::getenv("DFL_ROOT");
  return test::load_json(std::string(root ? root : ".") + "/tests/fixtures/gguf/gemma4_tokenizer_llamacpp.json");
}

// FNV-1a 64 over the entries, each followed by one NUL byte (as the generator computes it).
std::string fnv1a64(const std::vector<std::string>& items) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const std::string& s : items) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
    h = (h ^ 0u) * 0x100000001B3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

struct Vocab {
  std::string model = "gemma4", pre;  // pre "" = key absent (as llama.cpp's converter writes it)
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> types;
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = true;
};

std::string gemma4_gguf(const Vocab& v) {
  test::GgufBuilder b;
  b.kv_str("general.architecture", "gemma4");
  b.kv_str("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) b.kv_str("tokenizer.ggml.pre", v.pre);
  b.kv_str_array("tokenizer.ggml.tokens", v.tokens);
  b.kv_array<float>("tokenizer.ggml.scores", 6, std::vector<float>(v.tokens.size(), -1000.0f));
  b.kv_array<int32_t>("tokenizer.ggml.token_type", 5, v.types);
  b.kv_str_array("tokenizer.ggml.merges", v.merges);
  if (v.bos >= 0) b.kv_u32("tokenizer.ggml.bos_token_id", v.bos);
  if (v.eos >= 0) b.kv_u32("tokenizer.ggml.eos_token_id", v.eos);
  if (v.unk >= 0) b.kv_u32("tokenizer.ggml.unknown_token_id", v.unk);
  if (v.pad >= 0) b.kv_u32("tokenizer.ggml.padding_token_id", v.pad);
  b.kv_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  b.kv_bool("tokenizer.ggml.add_space_prefix", false);
  return b.build();
}

// Our eog set for a GGUF: the file's eos / eot plus gguf_eog_ids, sorted.
std::vector<int32_t> our_eog(const GgufFile& f, const Tokenizer& tok) {
  std::vector<int32_t> ids = gguf_eog_ids(f, tok);
  const GgufSpecialIds s = gguf_special_ids(f);
  for (int32_t id : {s.eos, s.eot})
    if (id >= 0) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string pieces_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += "[" + std::to_string(id) + " " + json(tok.decode({id})).dump() + "]";
  return out;
}

// Per-line comparison; returns the number of lines that differ anywhere.
size_t compare_lines(const Tokenizer& tok, const json& lines, const json& ids, const json& special,
                     const json& pieces, int32_t bos, const std::string& what) {
  size_t bad = 0, tokens = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string line = lines[i].get<std::string>();
    const auto want = ids[i].get<std::vector<int32_t>>();
    tokens += want.size();
    std::vector<int32_t> want_bos = {bos};
    want_bos.insert(want_bos.end(), want.begin(), want.end());
    if (!special[i].is_null()) want_bos = special[i].get<std::vector<int32_t>>();
    const std::string want_text = pieces[i].is_null() ? line : pieces[i].get<std::string>();
    const auto got = tok.encode(line);
    const bool ok = got == want && tok.encode(line, true) == want_bos && tok.decode(want) == want_text;
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << what << " line " << i << " " << json(line).dump() << "\n ours     "
                    << pieces_of(tok, got) << "\n llama.cpp " << pieces_of(tok, want)
                    << "\n decode " << json(tok.decode(want)).dump() << " want " << json(want_text).dump();
  }
  std::printf("[ %s ] %zu lines, %zu llama.cpp tokens: %zu lines differ (encode, encode+BOS, decode)\n",
              what.c_str(), lines.size(), tokens, bad);
  return bad;
}

TEST(GgufGemma4Tokenizer, TinyVocabsMatchLlamaCpp) {
  const json& o = oracle();
  ASSERT_EQ(o["tiny"].size(), 3u);
  for (const json& t : o["tiny"]) {
    Vocab v;
    v.model = t["model"].get<std::string>();
    v.pre = t["pre"].get<std::string>();
    v.tokens = t["tokens"].get<std::vector<std::string>>();
    v.types = t["types"].get<std::vector<int32_t>>();
    v.merges = t["merges"].get<std::vector<std::string>>();
    v.bos = t["bos"].get<int32_t>();
    v.eos = t["eos"].get<int32_t>();
    v.add_bos = t["add_bos_token"].get<bool>();  // false: llama.cpp forces BOS anyway
    test::TempDir dir("g4tok");
    const std::string path = dir.file("tiny.gguf");
    test::write_file(path, gemma4_gguf(v));
    const GgufFile f(path);
    const Tokenizer tok = gguf_tokenizer(f);
    const bool tool_response = tok.piece_to_id("<|tool_response>") >= 0;
    const std::string what = "tiny " + v.model + " pre " + v.pre + (tool_response ? " + <|tool_response>" : "");
    EXPECT_EQ(compare_lines(tok, t["lines"], t["ids"], t["ids_special"], t["pieces"], v.bos, what), 0u);
    EXPECT_EQ(our_eog(f, tok), t["eog"].get<std::vector<int32_t>>()) << what;
    // "</s>" is a control token (special) unless "<|tool_response>" exists.
    EXPECT_EQ(tok.is_special(tok.piece_to_id("</s>")), !tool_response) << what;
  }
}

TEST(GgufGemma4Tokenizer, Gemma3VocabAsGemma4MatchesLlamaCppOnCorpus) {
  const std::string src = test::real_tokenizer_path("gemma3");
  if (!file_exists(src)) GTEST_SKIP() << "shared tokenizer absent: " << src;
  const json& o = oracle();
  const json& meta = o["meta"];
  const json& hf = test::load_json(src);
  // Tokens in id order: the BPE vocab, then added tokens beyond it (<image_soft_token>), as
  // gguf-py's LlamaHfVocab lists them.
  const size_t n = meta["n_tokens"].get<size_t>();
  Vocab v;
  v.tokens.assign(n, "");
  std::vector<bool> seen(n, false);
  auto put = [&](const std::string& s, size_t id) {
    ASSERT_LT(id, n);
    v.tokens[id] = s;
    seen[id] = true;
  };
  for (const auto& [s, id] : hf["model"]["vocab"].items()) put(s, id.get<size_t>());
  for (const json& a : hf["added_tokens"]) put(a["content"].get<std::string>(), a["id"].get<size_t>());
  ASSERT_EQ(std::count(seen.begin(), seen.end(), false), 0);
  for (const json& m : hf["model"]["merges"])
    v.merges.push_back(m.is_string() ? m.get<std::string>()
                                     : m[0].get<std::string>() + " " + m[1].get<std::string>());
  ASSERT_EQ(fnv1a64(v.tokens), meta["fnv1a64_tokens"].get<std::string>()) << "token list differs from the oracle's GGUF";
  ASSERT_EQ(fnv1a64(v.merges), meta["fnv1a64_merges"].get<std::string>()) << "merges differ from the oracle's GGUF";
  v.types.assign(n, 1);
  for (const auto& [type, ids] : o["types"].items())
    for (const json& id : ids) v.types[id.get<size_t>()] = std::stoi(type);
  const json& sp = meta["special_ids"];
  v.bos = sp["bos"].get<int32_t>();
  v.eos = sp["eos"].get<int32_t>();
  v.unk = sp["unk"].get<int32_t>();
  v.pad = sp["pad"].get<int32_t>();
  v.add_bos = meta["add_special"]["bos"].get<bool>();

  test::TempDir dir("g4tok");
  const std::string path = dir.file("gemma4_vocab.gguf");
  test::write_file(path, gemma4_gguf(v));
  const GgufFile f(path);
  const Tokenizer tok = gguf_tokenizer(f);
  EXPECT_EQ(tok.vocab_size(), static_cast<int32_t>(n));
  const json& corpus = test::load_json(test::fixture_dir() + "/corpus.json");
  EXPECT_EQ(compare_lines(tok, corpus, o["corpus"], o["special"], o["pieces"], v.bos, "gemma3 vocab as gemma4"), 0u);
  EXPECT_EQ(our_eog(f, tok), o["eog"].get<std::vector<int32_t>>());
}

TEST(GgufGemma4Tokenizer, MalformedMerges) {
  Vocab v;
  v.tokens = {"<pad>", "<eos>", "<bos>", "a", "b", "ab"};
  v.types = {3, 3, 3, 1, 1, 1};
  v.bos = 2;
  v.merges = {"ab"};
  test::TempDir dir("g4tok");
  const std::string path = dir.file("bad.gguf");
  test::write_file(path, gemma4_gguf(v));
  try {
    gguf_tokenizer(GgufFile(path));
    ADD_FAILURE() << "accepted a merge without a space";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges entry 0"), std::string::npos) << e.what();
  }
  v.merges = {};
  test::write_file(path, gemma4_gguf(v));
  try {
    gguf_tokenizer(GgufFile(path));
    ADD_FAILURE() << "accepted a gemma4 vocabulary without merges";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemma4 needs tokenizer.ggml.merges"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dfl
