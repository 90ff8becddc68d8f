// Model families: each registers itself in its own arch file with one FamilyEntry (the
// architectures it answers to, its config parser and, for targets, its factory); the one table
// of entries is in model/registry.cc. Adding a family = one arch file + one line in that table.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "model/config.h"
#include "model/model.h"

namespace dfl {

struct FamilyEntry {
  Family family;
  std::vector<std::string> architectures;  // HF `architectures[0]` values, the first canonical
  std::vector<std::string> model_types;    // `model_type` values used when architectures is absent
  // Claims a config regardless of its architecture string (e.g. any config with dflash_config).
  bool (*claims)(const nlohmann::json& root) = nullptr;
  // Fills c (family, dir, architecture and model_type are already set).
  void (*parse)(const nlohmann::json& root, ModelConfig& c, const ConfigOptions& opts) = nullptr;
  // Builds a target; null for families that are not targets (drafters).
  std::unique_ptr<CausalLM> (*make)(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) = nullptr;

  // GGUF dialect (llama.cpp's converter): `general.architecture` values, the HF-style config.json
  // a file's metadata amounts to (then parsed by `parse`), and the HF name of a GGUF tensor ("" =
  // not used). Null when the family has no GGUF form.
  std::vector<std::string> gguf_architectures;
  nlohmann::json (*gguf_config)(const GgufFile& f) = nullptr;
  std::string (*gguf_tensor_name)(std::string_view gguf_name) = nullptr;
  // Rows the converter reordered: for a GGUF tensor, the stored row of each HF row ({} = as
  // stored), e.g. the `llama` converter's q/k permutation. Null = nothing reordered.
  std::vector<int64_t> (*gguf_row_order)(const GgufFile& f, std::string_view gguf_name,
                                         int64_t rows) = nullptr;

  // architectures[i] matching model_types[i] (or the first).
  std::string default_architecture(const std::string& model_type) const;
};

extern const FamilyEntry kQwen3Family;
extern const FamilyEntry kMiMoV2Family;
extern const FamilyEntry kDFlashDraftFamily;
extern const FamilyEntry kGemma3Family;
extern const FamilyEntry kQwen35Family;
extern const FamilyEntry kLlamaFamily;
extern const FamilyEntry kGemma4Family;

// Every family, in lookup order (claims first).
const std::vector<const FamilyEntry*>& all_families();
// The family of a config: one that claims it, else by architecture, else by model_type (when
// the architecture is absent). nullptr when none does.
const FamilyEntry* find_family(const nlohmann::json& root, const std::string& architecture,
                               const std::string& model_type);
// The family whose GGUF dialect has this `general.architecture`; nullptr when none.
const FamilyEntry* find_gguf_family(const std::string& gguf_architecture);
// The family entry of a parsed config.
const FamilyEntry& family_of(const ModelConfig& c);

}  // namespace dfl
