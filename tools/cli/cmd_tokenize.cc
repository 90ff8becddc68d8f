#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "core/mmap.h"
#include "engine/model_assets.h"

namespace dfl::cli {

namespace {
const std::vector<FlagSpec> kFlags = {
    {"--model", "DIR", "model folder holding tokenizer.json, or a GGUF file (its vocabulary)"},
    {"--text", "TEXT", "text to tokenize"},
    {"--file", "F", "read the text from a file"},
    {"--special", "", "add the tokenizer's special tokens (e.g. BOS) like add_special_tokens=True"},
    {"--json", "", "print {\"ids\": [...], \"pieces\": [...]}"},
    {"--help", "", "show this help"},
};
}  // namespace

int cmd_tokenize(int argc, char** argv) {
  Args args(kFlags, argc, argv, 2);
  if (args.has("--help")) {
    std::cout << usage("dflash tokenize --model DIR (--text TEXT | --file F) [--json]", kFlags);
    return 0;
  }
  DFL_CHECK(args.positional().empty(), "unexpected argument '", args.positional().empty() ? "" : args.positional()[0], "'");
  DFL_CHECK(args.has("--model"), "--model DIR is required");
  DFL_CHECK(args.has("--text") != args.has("--file"), "give exactly one of --text or --file");
  const ModelAssets assets = ModelAssets::load(args.str("--model"));
  const Tokenizer& tok = assets.require_tokenizer();
  const std::string text = args.has("--text") ? args.str("--text") : read_text_file(args.str("--file"));
  const std::vector<int32_t> ids = tok.encode(text, args.has("--special"));
  if (args.has("--json")) {
    nlohmann::json j;
    j["ids"] = ids;
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok.id_to_piece(id));
    j["pieces"] = pieces;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << ids[i] << (i + 1 < ids.size() ? " " : "\n");
  for (int32_t id : ids) std::cout << id << "\t" << tok.id_to_piece(id) << "\n";
  return 0;
}

}  // namespace dfl::cli
