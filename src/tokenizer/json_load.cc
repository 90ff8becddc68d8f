#include "tokenizer/json_load.h"

#include "core/error.h"

namespace dfl::tok {

using json = nlohmann::json;

namespace {

class Handler : public nlohmann::json_sax<json> {
 public:
  explicit Handler(TokenizerJson& out) : out_(out) {}

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab && skip_ == 0) {
      out_.bpe.vocab.emplace_back(std::move(key_), v);
      return true;
    }
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab && skip_ == 0) {
      // Ids beyond int64 are clamped to an out-of-range value the loader rejects.
      out_.bpe.vocab.emplace_back(std::move(key_), v > static_cast<number_unsigned_t>(INT64_MAX)
                                                       ? INT64_MAX
                                                       : static_cast<int64_t>(v));
      return true;
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& s) override {
    if (mode_ == Mode::kMerges && skip_ == 0) {
      out_.bpe.merges.push_back({std::move(s), {}, true});
      return true;
    }
    if (mode_ == Mode::kMergePair && skip_ == 0) {
      pair_.push_back(std::move(s));
      return true;
    }
    return value(json(std::move(s)));
  }
  bool binary(binary_t& b) override { return value(json(b)); }

  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) return nested();
    if (at_model_member() && key_ == "vocab") {
      mode_ = Mode::kVocab;
      out_.bpe.has_vocab = true;
      out_.bpe.vocab.clear();
      return true;
    }
    return open(json::object());
  }
  bool end_object() override {
    if (mode_ != Mode::kDom) return close_nested();
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges && skip_ == 0) {
      mode_ = Mode::kMergePair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::kDom) return nested();
    if (at_model_member() && key_ == "merges") {
      mode_ = Mode::kMerges;
      out_.bpe.has_merges = true;
      out_.bpe.merges.clear();
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair && skip_ == 0) {
      if (pair_.size() == 2) {
        out_.bpe.merges.push_back({std::move(pair_[0]), std::move(pair_[1]), false});
      } else {
        bad(str("model.merges entry ", out_.bpe.merges.size() + 1, " is not a pair of strings"));
      }
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ != Mode::kDom) return close_nested();
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw Error(str("tokenizer.json: not valid JSON: ", e.what()));
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  // The container being opened is a direct member of the top-level "model" object.
  bool at_model_member() const {
    return stack_.size() == 2 && keys_.size() == 2 && keys_[1] == "model" && stack_[1]->is_object();
  }

  void bad(std::string msg) {
    if (out_.bpe.error.empty()) out_.bpe.error = std::move(msg);
  }

  // A value inside a streamed member that is not of the expected type.
  bool stray() {
    if (skip_ == 0) {
      bad(mode_ == Mode::kVocab ? str("model.vocab entry '", key_, "' has a non-integer id")
                                : str("model.merges entry ", out_.bpe.merges.size() + 1,
                                      " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
    return true;
  }
  bool nested() {
    stray();
    ++skip_;
    return true;
  }
  bool close_nested() {
    if (skip_ > 0) {
      --skip_;
    } else {
      mode_ = Mode::kDom;  // end of model.vocab / model.merges
    }
    return true;
  }

  bool value(json v) {
    if (mode_ != Mode::kDom) return stray();
    insert(std::move(v));
    return true;
  }
  json* insert(json v) {
    if (stack_.empty()) {
      out_.root = std::move(v);
      return &out_.root;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    if (stack_.size() == 1 && key_ == "model") out_.bpe = BpeSource{};  // a repeated "model" key
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  bool open(json container) {
    const std::string k = stack_.empty() || stack_.back()->is_array() ? std::string() : key_;
    stack_.push_back(insert(std::move(container)));
    keys_.push_back(k);
    return true;
  }

  TokenizerJson& out_;
  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // key under which each open container was inserted
  std::string key_;
  Mode mode_ = Mode::kDom;
  int skip_ = 0;  // depth of unexpected containers inside a streamed member
  std::vector<std::string> pair_;
};

}  // namespace

TokenizerJson parse_tokenizer_json(const char* begin, const char* end) {
  TokenizerJson out;
  Handler h(out);
  const bool ok = json::sax_parse(begin, end, &h);
  DFL_CHECK(ok, "tokenizer.json: not valid JSON");
  return out;
}

BpeSource bpe_source_from_json(const json& model) {
  BpeSource src;
  if (auto v = model.find("vocab"); v != model.end()) {
    src.has_vocab = v->is_object();
    if (v->is_object()) {
      for (auto it = v->begin(); it != v->end(); ++it) {
        if (!it.value().is_number_integer()) {
          if (src.error.empty()) src.error = str("model.vocab entry '", it.key(), "' has a non-integer id");
          continue;
        }
        src.vocab.emplace_back(it.key(), it.value().get<int64_t>());
      }
    }
  }
  if (auto m = model.find("merges"); m != model.end() && m->is_array()) {
    src.has_merges = true;
    for (const json& e : *m) {
      if (e.is_string()) {
        src.merges.push_back({e.get<std::string>(), {}, true});
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        src.merges.push_back({e[0].get<std::string>(), e[1].get<std::string>(), false});
      } else if (src.error.empty()) {
        src.error = str("model.merges entry ", src.merges.size() + 1, " is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  return src;
}

}  // namespace dfl::tok
