// Parsing of tokenizer.json that keeps the two huge members out of the JSON DOM.
//
// model.vocab (hundreds of thousands of entries) and model.merges (up to ~500k pairs) are streamed
// into flat vectors by a SAX handler; everything else becomes an ordinary nlohmann::json tree.
// This roughly halves the load time of large vocabularies (Gemma 3: 33 MB) compared with a full
// DOM. Contract: malformed JSON throws dfl::Error with the parser's position and reason; entries
// of the wrong type are recorded (first one only) so the BPE loader can report them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dfl::tok {

struct BpeSource {
  bool has_vocab = false;
  std::vector<std::pair<std::string, int64_t>> vocab;  // in file order
  bool has_merges = false;
  // A merge is either a legacy "a b" line (legacy=true, text in `a`) or a pair [a, b].
  struct Merge {
    std::string a, b;
    bool legacy;
  };
  std::vector<Merge> merges;
  std::string error;  // first malformed entry, empty if none
};

struct TokenizerJson {
  nlohmann::json root;  // the document without model.vocab / model.merges
  BpeSource bpe;        // what was streamed out of model.vocab / model.merges
};

TokenizerJson parse_tokenizer_json(const char* begin, const char* end);

// Fills a BpeSource from an in-memory "model" object (vocab / merges still inside it).
BpeSource bpe_source_from_json(const nlohmann::json& model);

}  // namespace dfl::tok
