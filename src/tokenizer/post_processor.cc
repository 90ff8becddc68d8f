#include "tokenizer/post_processor.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace dfl::tok {

using json = nlohmann::json;

namespace {

constexpr int kMaxDepth = 32;

int32_t checked_id(const json& v, const char* where) {
  DFL_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 &&
                v.get<int64_t>() < std::numeric_limits<int32_t>::max(),
            "tokenizer.json: post_processor ", where, " id must be a non-negative integer");
  return static_cast<int32_t>(v.get<int64_t>());
}

// ["<s>", 0] as used by BertProcessing / RobertaProcessing.
int32_t pair_id(const json& j, const char* key) {
  auto it = j.find(key);
  DFL_CHECK(it != j.end() && it->is_array() && it->size() == 2,
            "tokenizer.json: post_processor needs \"", key, "\": [token, id]");
  return checked_id((*it)[1], key);
}

}  // namespace

PostProcessor PostProcessor::from_json(const json& j) {
  PostProcessor p;
  if (!j.is_null()) p.parse_into(j, 0);
  return p;
}

void PostProcessor::parse_into(const json& j, int depth) {
  DFL_CHECK(depth < kMaxDepth, "tokenizer.json: post_processor nesting is too deep");
  DFL_CHECK(j.is_object(), "tokenizer.json: post_processor must be an object or null");
  auto t = j.find("type");
  DFL_CHECK(t != j.end() && t->is_string(), "tokenizer.json: post_processor has no \"type\"");
  const std::string type = t->get<std::string>();
  if (type == "Sequence") {
    auto list = j.find("processors");
    DFL_CHECK(list != j.end() && list->is_array(),
              "tokenizer.json: Sequence post_processor needs a \"processors\" array");
    for (const json& sub : *list) parse_into(sub, depth + 1);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    templates_.push_back({{false, {pair_id(j, "cls")}}, {true, {}}, {false, {pair_id(j, "sep")}}});
  } else if (type == "TemplateProcessing") {
    auto single = j.find("single");
    auto specials = j.find("special_tokens");
    DFL_CHECK(single != j.end() && single->is_array(),
              "tokenizer.json: TemplateProcessing needs a \"single\" array");
    DFL_CHECK(specials == j.end() || specials->is_object(),
              "tokenizer.json: TemplateProcessing \"special_tokens\" must be an object");
    Template tpl;
    for (const json& item : *single) {
      DFL_CHECK(item.is_object() && item.size() == 1,
                "tokenizer.json: TemplateProcessing item must be {\"SpecialToken\"|\"Sequence\": ...}");
      if (item.contains("Sequence")) {
        tpl.push_back({true, {}});
        continue;
      }
      auto st = item.find("SpecialToken");
      DFL_CHECK(st != item.end() && st->is_object() && st->contains("id") && (*st)["id"].is_string(),
                "tokenizer.json: TemplateProcessing item must be {\"SpecialToken\"|\"Sequence\": ...}");
      const std::string name = (*st)["id"].get<std::string>();
      DFL_CHECK(specials != j.end() && specials->contains(name),
                "tokenizer.json: TemplateProcessing uses special token '", name,
                "' that is not in \"special_tokens\"");
      const json& spec = (*specials)[name];
      DFL_CHECK(spec.is_object() && spec.contains("ids") && spec["ids"].is_array(),
                "tokenizer.json: special_tokens['", name, "'] needs an \"ids\" array");
      Piece piece{false, {}};
      for (const json& v : spec["ids"]) piece.ids.push_back(checked_id(v, "special token"));
      tpl.push_back(std::move(piece));
    }
    templates_.push_back(std::move(tpl));
  } else {
    throw Error(str("tokenizer.json: unsupported post_processor type '", type, "'"));
  }
}

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids) const {
  for (const Template& tpl : templates_) {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Piece& p : tpl) {
      const std::vector<int32_t>& src = p.is_sequence ? ids : p.ids;
      out.insert(out.end(), src.begin(), src.end());
    }
    ids = std::move(out);
  }
  return ids;
}

}  // namespace dfl::tok
