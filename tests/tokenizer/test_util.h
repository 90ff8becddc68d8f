// Shared helpers of the tokenizer tests: fixture paths and cached loads.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/mmap.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dfl::test {

// Root of the shared data: $DFL_SHARED, else ../shared beside the repository root.
inline std::string shared_dir() {
  if (const char* s = std::getenv("DFL_SHARED")) return s;
  const char* root = std::getenv("DFL_ROOT");
  return std::string(root ? root : ".") + "/../shared";
}

inline std::string fixture_dir() {
  const char* root = std::getenv("DFL_ROOT");
  return std::string(root ? root : ".") + "/tests/fixtures/tokenizer";
}

inline std::string real_tokenizer_path(const std::string& name) {
  return shared_dir() + "/data/tokenizers/" + name + "/tokenizer.json";
}

inline const nlohmann::json& load_json(const std::string& path) {
  static std::map<std::string, std::unique_ptr<nlohmann::json>> cache;
  auto& slot = cache[path];
  if (!slot) slot = std::make_unique<nlohmann::json>(nlohmann::json::parse(read_text_file(path)));
  return *slot;
}

// Loaded once per process; nullptr when the shared tokenizer file is absent.
inline const Tokenizer* real_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  const std::string path = real_tokenizer_path(name);
  std::unique_ptr<Tokenizer> tok;
  if (file_exists(path)) tok = std::make_unique<Tokenizer>(Tokenizer::from_file(path));
  return (cache[name] = std::move(tok)).get();
}

}  // namespace dfl::test
