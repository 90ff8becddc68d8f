#include "engine/model_assets.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap.h"
#include "engine/gguf_tokenizer.h"
#include "io/checkpoint.h"

namespace dfl {

namespace {
void add_id(std::vector<int32_t>& ids, int64_t id) {
  if (id >= 0 && id < (1ll << 31) && std::find(ids.begin(), ids.end(), id) == ids.end())
    ids.push_back(static_cast<int32_t>(id));
}

// tokenizer_config special tokens are either strings or {"content": "..."} objects.
std::string token_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}
}  // namespace

// A GGUF file carries its own vocabulary, special ids and (maybe) chat template; a folder with
// the .gguf and an HF tokenizer.json / tokenizer_config.json uses those files instead.
ModelAssets load_folder(const std::string& dir);

ModelAssets load_gguf_assets(const std::string& gguf_path, const std::string& folder) {
  ModelAssets a = folder.empty() ? ModelAssets{} : load_folder(folder);
  a.dir = folder.empty() ? gguf_path : folder;
  const GgufFile f(gguf_path);
  if (!a.tokenizer && f.has("tokenizer.ggml.tokens")) a.tokenizer = gguf_tokenizer(f);
  if (!a.chat)
    if (auto t = gguf_chat_template(f)) a.chat = ChatTemplate::from_string(*t);
  const GgufSpecialIds ids = gguf_special_ids(f);
  add_id(a.eos_ids, ids.eos);
  add_id(a.eos_ids, ids.eot);
  if (a.tokenizer) {
    // Gemma's chat end token, when the vocabulary has it.
    const int32_t eot = a.tokenizer->piece_to_id("<end_of_turn>");
    if (eot >= 0) add_id(a.eos_ids, eot);
    for (int32_t id : gguf_eog_ids(f, *a.tokenizer)) add_id(a.eos_ids, id);
  }
  return a;
}

ModelAssets ModelAssets::load(const std::string& dir) {
  if (const std::string g = gguf_file(dir); !g.empty())
    return load_gguf_assets(g, dir_exists(dir) && file_exists(dir + "/tokenizer.json") ? dir : "");
  return load_folder(dir);
}

// tokenizer.json, tokenizer_config.json, generation_config.json of a folder (each optional).
ModelAssets load_folder(const std::string& dir) {
  DFL_CHECK(dir_exists(dir), "model folder '", dir, "' does not exist");
  ModelAssets a;
  a.dir = dir;
  const std::string tok = dir + "/tokenizer.json";
  if (file_exists(tok)) a.tokenizer = Tokenizer::from_file(tok);

  const std::string tc = dir + "/tokenizer_config.json";
  if (file_exists(tc)) {
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(read_text_file(tc));
    } catch (const nlohmann::json::exception& e) {
      throw Error(str("'", tc, "' is not valid JSON: ", e.what()));
    }
    DFL_CHECK(j.is_object(), "'", tc, "' must hold a JSON object");
    if (j.contains("eos_token")) a.eos_token = token_text(j["eos_token"]);
    if (j.contains("chat_template") && !j["chat_template"].is_null())
      a.chat = ChatTemplate::from_config_json(j);
  }

  const std::string gc = dir + "/generation_config.json";
  if (file_exists(gc)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(gc));
    } catch (const nlohmann::json::exception& e) {
      throw Error(str("'", gc, "' is not valid JSON: ", e.what()));
    }
    if (j.is_object() && j.contains("eos_token_id")) {
      const auto& e = j["eos_token_id"];
      if (e.is_number_integer()) add_id(a.eos_ids, e.get<int64_t>());
      if (e.is_array())
        for (const auto& x : e)
          if (x.is_number_integer()) add_id(a.eos_ids, x.get<int64_t>());
    }
  }
  if (a.tokenizer && !a.eos_token.empty()) add_id(a.eos_ids, a.tokenizer->piece_to_id(a.eos_token));
  return a;
}

const Tokenizer& ModelAssets::require_tokenizer() const {
  DFL_CHECK(tokenizer.has_value(), "'", dir, "' has no tokenizer.json (use --prompt-ids to pass token ids)");
  return *tokenizer;
}

}  // namespace dfl
