#include "tokenizer/vocab_import.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "tokenizer/flat_map.h"
#include "tokenizer/json_load.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dfl {

namespace tok {
std::shared_ptr<const Tokenizer::Impl> build_tokenizer(const nlohmann::json& root, BpeSource bpe);
}

namespace {

using json = nlohmann::json;

constexpr std::string_view kSpm = "\xE2\x96\x81";  // ▁

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  size_t p = 0;
  while ((p = s.find(from, p)) != std::string::npos) {
    s.replace(p, from.size(), to);
    p += to.size();
  }
  return s;
}

size_t n_chars(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += utf8::char_len(static_cast<unsigned char>(s[i]))) ++n;
  return n;
}

// Pre-tokenizer regexes of llama.cpp's tokenizer.ggml.pre names (as in HF tokenizer.json).
const char* pre_regex(const std::string& pre, const std::string& origin) {
  if (pre == "qwen2" || pre == "deepseek-r1-qwen")
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
           "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3")
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
           "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre.empty() || pre == "default" || pre == "gpt-2" || pre == "gpt2")
    return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  throw Error(str("gguf '", origin, "': tokenizer.ggml.pre '", pre,
                  "' is not supported (known: qwen2, llama-bpe, gpt-2, default)"));
}

json added_tokens(const std::vector<int32_t>& types, const std::vector<std::string>& toks) {
  json out = json::array();
  for (size_t i = 0; i < toks.size(); ++i) {
    const int t = types[i];
    if (t != 2 && t != 3 && t != 4) continue;
    out.push_back({{"id", i}, {"content", toks[i]}, {"single_word", false}, {"lstrip", false},
                   {"rstrip", false}, {"normalized", false}, {"special", t != 4}});
  }
  return out;
}

json template_processor(const TokenizerVocab& v, bool add_bos, const std::vector<std::string>& toks) {
  auto ok = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < toks.size(); };
  const bool bos = add_bos && ok(v.bos_id), eos = v.add_eos && ok(v.eos_id);
  if (!bos && !eos) return nullptr;
  json single = json::array(), pair = json::array(), special = json::object();
  auto sp = [&](int32_t id, int type_id) {
    special[toks[id]] = {{"id", toks[id]}, {"ids", {id}}, {"tokens", {toks[id]}}};
    return json{{"SpecialToken", {{"id", toks[id]}, {"type_id", type_id}}}};
  };
  if (bos) single.push_back(sp(v.bos_id, 0));
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos) single.push_back(sp(v.eos_id, 0));
  pair = single;
  if (bos) pair.push_back(sp(v.bos_id, 1));
  pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
  if (eos) pair.push_back(sp(v.eos_id, 1));
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair},
          {"special_tokens", special}};
}

// tokenizer.ggml.merges ("left right") as BPE merges; `model` names the requirement in errors.
std::vector<tok::BpeSource::Merge> parse_merges(const TokenizerVocab& v) {
  DFL_CHECK(!v.merges.empty(), "gguf '", v.origin, "': tokenizer.ggml.model ", v.model,
            " needs tokenizer.ggml.merges");
  std::vector<tok::BpeSource::Merge> out;
  out.reserve(v.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t sp = m.find(' ', 1);  // as llama.cpp splits it: a left part may be " "
    DFL_CHECK(sp != std::string::npos && sp + 1 < m.size(), "gguf '", v.origin,
              "': tokenizer.ggml.merges entry ", i, " is not \"left right\"");
    out.push_back({m.substr(0, sp), m.substr(sp + 1), false});
  }
  return out;
}

// Token types as the tokenizer uses them: the file's (1 when absent) and, for gemma4, llama.cpp's
// overrides by token text (llama-vocab.cpp load): control-looking names become CONTROL, and
// "</s>" becomes NORMAL when the vocabulary has "<|tool_response>" (Gemma 4's workaround).
std::vector<int32_t> effective_types(const TokenizerVocab& v) {
  std::vector<int32_t> t(v.tokens.size(), 1);
  for (size_t i = 0; i < v.token_types.size(); ++i) t[i] = v.token_types[i];
  if (!llamacpp::is_gemma4_tokenizer(v.model, v.pre)) return t;
  const bool tool_response =
      std::find(v.tokens.begin(), v.tokens.end(), "<|tool_response>") != v.tokens.end();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (tool_response && v.tokens[i] == "</s>") t[i] = 1;
    else if (llamacpp::is_control_name(v.tokens[i])) t[i] = 3;
  }
  return t;
}

void check_vocab(const TokenizerVocab& v) {
  DFL_CHECK(!v.tokens.empty(), "gguf '", v.origin, "': tokenizer.ggml.tokens is empty");
  DFL_CHECK(v.token_types.empty() || v.token_types.size() == v.tokens.size(), "gguf '", v.origin,
            "': tokenizer.ggml.token_type has ", v.token_types.size(), " entries for ",
            v.tokens.size(), " tokens");
  DFL_CHECK(v.scores.empty() || v.scores.size() == v.tokens.size(), "gguf '", v.origin,
            "': tokenizer.ggml.scores has ", v.scores.size(), " entries for ", v.tokens.size(),
            " tokens");
  for (size_t i = 0; i < v.tokens.size(); ++i)
    DFL_CHECK(utf8::is_valid(v.tokens[i]), "gguf '", v.origin, "': token ", i,
              " is not valid UTF-8");
}

}  // namespace

namespace llamacpp {

// The texts llama.cpp's loader matches (llama-vocab.cpp, Aug 2026): end-of-generation names
// (its special_eog_ids list, which includes every end-of-turn name), then the FIM names of its
// fim_pre / suf / mid / pad / rep / sep searches (pad, rep and sep ones also end generation).
constexpr std::string_view kEogNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[",
    // FIM pad / repo / file-separator names
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
    "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"};
constexpr std::string_view kOtherControlNames[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};

bool is_gemma4_tokenizer(std::string_view model, std::string_view pre) {
  return model == "gemma4" || (model == "gpt2" && (pre == "gemma4" || pre == "granite-embed-multi-311m"));
}

bool is_eog_name(std::string_view text) {
  return std::find(std::begin(kEogNames), std::end(kEogNames), text) != std::end(kEogNames);
}

bool is_control_name(std::string_view text) {
  return is_eog_name(text) ||
         std::find(std::begin(kOtherControlNames), std::end(kOtherControlNames), text) !=
             std::end(kOtherControlNames);
}

std::vector<int32_t> gemma4_eog_ids(const std::function<int32_t(std::string_view)>& id_of) {
  std::vector<int32_t> ids;
  const bool tool_response = id_of("<|tool_response>") >= 0;
  for (std::string_view name : kEogNames) {
    if (tool_response && name == "</s>") continue;
    const int32_t id = id_of(name);
    if (id >= 0) ids.push_back(id);
  }
  return ids;
}

}  // namespace llamacpp

Tokenizer Tokenizer::from_vocab(const TokenizerVocab& v) {
  check_vocab(v);
  const bool gemma4 = llamacpp::is_gemma4_tokenizer(v.model, v.pre);
  const std::vector<int32_t> types = effective_types(v);
  json root = json::object();
  tok::BpeSource bpe;
  bpe.has_vocab = bpe.has_merges = true;
  std::vector<std::string> toks = v.tokens;
  auto type_of = [&](size_t i) { return types[i]; };

  if (v.model == "llama") {
    DFL_CHECK(v.scores.size() == v.tokens.size(), "gguf '", v.origin,
              "': tokenizer.ggml.model llama needs tokenizer.ggml.scores");
    std::vector<float> scores = v.scores;
    for (size_t i = 0; i < toks.size(); ++i)
      if (type_of(i) == 4) {
        toks[i] = replace_all(toks[i], " ", kSpm);
        scores[i] = 0.0f;
      }
    // Token text → its first id (a repeated text keeps the first, as llama.cpp's map does).
    tok::StringIds id;
    size_t bytes = 0;
    for (const std::string& t : toks) bytes += t.size();
    id.reserve(toks.size(), bytes);
    for (size_t i = 0; i < toks.size(); ++i)
      if (id.find(toks[i]) < 0) id.insert(toks[i], static_cast<int32_t>(i));
    struct M {
      int32_t l, r;
      float score;
      uint32_t ll, lr;  // lengths in characters
    };
    std::vector<M> merges;
    std::vector<M> local;
    for (size_t i = 0; i < toks.size(); ++i) {
      const std::string_view s = toks[i];
      local.clear();
      for (size_t p = utf8::char_len(static_cast<unsigned char>(s[0])); p < s.size();
           p += utf8::char_len(static_cast<unsigned char>(s[p]))) {
        const int32_t a = id.find(s.substr(0, p));
        if (a < 0) continue;
        const int32_t b = id.find(s.substr(p));
        if (b < 0) continue;
        local.push_back({a, b, scores[i], 0, 0});
      }
      std::sort(local.begin(), local.end(),
                [](const M& x, const M& y) { return x.l != y.l ? x.l < y.l : x.r < y.r; });
      for (M& m : local) {
        m.ll = static_cast<uint32_t>(n_chars(toks[m.l]));
        m.lr = static_cast<uint32_t>(n_chars(toks[m.r]));
        merges.push_back(m);
      }
    }
    std::stable_sort(merges.begin(), merges.end(), [](const M& x, const M& y) {
      if (x.score != y.score) return x.score > y.score;
      if (x.ll != y.ll) return x.ll > y.ll;
      return x.lr > y.lr;
    });
    bpe.merges.reserve(merges.size());
    for (const M& m : merges) bpe.merges.push_back({toks[m.l], toks[m.r], false});
    json model = {{"type", "BPE"}, {"dropout", nullptr}, {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr}, {"fuse_unk", true}, {"byte_fallback", true},
                  {"ignore_merges", false}};
    model["unk_token"] = v.unk_id >= 0 && static_cast<size_t>(v.unk_id) < toks.size()
                             ? json(toks[v.unk_id]) : json(nullptr);
    root["model"] = model;
    const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpm}};
    json dec = json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpm}}}, {"content", " "}},
                            {{"type", "ByteFallback"}},
                            {{"type", "Fuse"}}});
    if (v.add_space_prefix) {
      root["normalizer"] = {{"type", "Sequence"},
                            {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kSpm}}, replace})}};
      root["pre_tokenizer"] = nullptr;
      dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    } else {
      root["normalizer"] = replace;
      root["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}},
                               {"behavior", "MergedWithPrevious"}, {"invert", false}};
    }
    root["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
  } else if (v.model == "gpt2" && !gemma4) {
    bpe.merges = parse_merges(v);
    root["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""},
                     {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false}};
    const json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                     {"use_regex", false}};
    root["normalizer"] = v.pre == "qwen2" ? json{{"type", "NFC"}} : json(nullptr);
    root["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", pre_regex(v.pre, v.origin)}}},
                                        {"behavior", "Isolated"}, {"invert", false}},
                                       bl})}};
    root["decoder"] = bl;
  } else if (gemma4) {
    // Model gemma4: tokenizer.ggml.pre is not read (llama.cpp sets it to gemma4 whatever the
    // file says); model gpt2 with that pre is the same tokenizer. Scores are unused.
    bpe.merges = parse_merges(v);
    root["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false}, {"byte_fallback", true}, {"ignore_merges", false},
                     {"ignore_merges_runs_of", "\n"}};
    root["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpm}};
    root["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "[^\\n]+|[\\n]+"}}},
                             {"behavior", "Isolated"}, {"invert", false}};
    root["decoder"] = {{"type", "Sequence"},
                       {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpm}}}, {"content", " "}},
                                                 {{"type", "ByteFallback"}},
                                                 {{"type", "Fuse"}}})}};
  } else {
    throw Error(str("gguf '", v.origin, "': tokenizer.ggml.model '", v.model,
                    "' is not supported (known: llama, gpt2, gemma4)"));
  }
  bpe.vocab.reserve(toks.size());
  for (size_t i = 0; i < toks.size(); ++i) {
    const int t = type_of(i);
    // Added-only tokens of byte-level vocabularies ([PAD…] fillers, specials) stay out of the
    // BPE vocab, as in HF; SentencePiece vocabularies keep every piece.
    if (v.model == "gpt2" && !gemma4 && (t == 3 || t == 4 || t == 5)) continue;
    bpe.vocab.emplace_back(toks[i], static_cast<int64_t>(i));
  }
  root["added_tokens"] = added_tokens(types, toks);
  // add_bos: llama.cpp PR 21500 forces it for gemma4.
  json post = template_processor(v, v.add_bos || gemma4, toks);
  if (v.model == "gpt2" && !gemma4 && post.is_null())
    post = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
            {"use_regex", false}};
  root["post_processor"] = post;
  try {
    return Tokenizer(tok::build_tokenizer(root, std::move(bpe)));
  } catch (const Error& e) {
    throw Error(str("gguf '", v.origin, "': tokenizer: ", e.what()));
  }
}

}  // namespace dfl
