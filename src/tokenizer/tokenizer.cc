#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_load.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace dfl {

using json = nlohmann::json;

struct Tokenizer::Impl {
  tok::Normalizer normalizer;
  tok::PreTokenizer pre_tokenizer;
  std::unique_ptr<tok::Bpe> model;
  tok::Decoder decoder;
  tok::PostProcessor post_processor;
  tok::AddedVocab added;
  int32_t vocab_size = 0;

  void encode_text(std::string_view text, std::vector<int32_t>& ids) const;
};

namespace {

bool flag(const json& t, const char* key, bool dflt) {
  auto it = t.find(key);
  if (it == t.end() || it->is_null()) return dflt;
  DFL_CHECK(it->is_boolean(), "tokenizer.json: added_tokens[].", key, " must be a boolean");
  return it->get<bool>();
}

const json& member_or_null(const json& root, const char* key) {
  static const json kNull;
  auto it = root.find(key);
  return it == root.end() ? kNull : *it;
}

std::vector<tok::AddedToken> parse_added_tokens(const json& root) {
  std::vector<tok::AddedToken> out;
  const json& list = member_or_null(root, "added_tokens");
  if (list.is_null()) return out;
  DFL_CHECK(list.is_array(), "tokenizer.json: \"added_tokens\" must be an array");
  for (const json& t : list) {
    DFL_CHECK(t.is_object(), "tokenizer.json: added_tokens entries must be objects");
    auto id = t.find("id");
    auto content = t.find("content");
    DFL_CHECK(content != t.end() && content->is_string(),
              "tokenizer.json: an added token has no string \"content\"");
    DFL_CHECK(id != t.end() && id->is_number_integer() && id->get<int64_t>() >= 0 &&
                  id->get<int64_t>() < std::numeric_limits<int32_t>::max(),
              "tokenizer.json: added token '", content->get<std::string>(),
              "' needs a non-negative integer \"id\"");
    tok::AddedToken a;
    a.content = content->get<std::string>();
    a.id = static_cast<int32_t>(id->get<int64_t>());  // informative only: HF assigns ids itself
    a.single_word = flag(t, "single_word", false);
    a.lstrip = flag(t, "lstrip", false);
    a.rstrip = flag(t, "rstrip", false);
    a.normalized = flag(t, "normalized", true);
    a.special = flag(t, "special", false);
    out.push_back(std::move(a));
  }
  return out;
}

std::shared_ptr<const Tokenizer::Impl> build(const json& root, tok::BpeSource bpe) {
  DFL_CHECK(root.is_object(), "tokenizer.json: top level must be a JSON object");
  auto model_it = root.find("model");
  DFL_CHECK(model_it != root.end() && model_it->is_object(),
            "tokenizer.json: missing \"model\" object");
  const json& model = *model_it;
  std::string type;
  if (auto t = model.find("type"); t != model.end()) {
    DFL_CHECK(t->is_string(), "tokenizer.json: model.type must be a string");
    type = t->get<std::string>();
  } else if (model.contains("merges")) {
    type = "BPE";  // older files omit the type; merges identify BPE
  }
  DFL_CHECK(type == "BPE", "tokenizer.json: unsupported model type '", type,
            "' (only BPE is implemented)");

  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->model = std::make_unique<tok::Bpe>(model, std::move(bpe));
  impl->normalizer = tok::Normalizer::from_json(member_or_null(root, "normalizer"));
  impl->pre_tokenizer = tok::PreTokenizer::from_json(member_or_null(root, "pre_tokenizer"));
  impl->decoder = tok::Decoder::from_json(member_or_null(root, "decoder"));
  impl->post_processor = tok::PostProcessor::from_json(member_or_null(root, "post_processor"));
  impl->added.build(parse_added_tokens(root), impl->normalizer,
                    !member_or_null(root, "normalizer").is_null(), *impl->model);
  impl->vocab_size = std::max(impl->model->max_id(), impl->added.max_id()) + 1;
  return impl;
}

std::shared_ptr<const Tokenizer::Impl> parse_and_build(const char* begin, const char* end) {
  tok::TokenizerJson doc;
  try {
    doc = tok::parse_tokenizer_json(begin, end);
  } catch (const json::exception& e) {
    throw Error(str("tokenizer.json: not valid JSON: ", e.what()));
  }
  try {
    return build(doc.root, std::move(doc.bpe));
  } catch (const json::exception& e) {
    throw Error(str("tokenizer.json: unexpected structure: ", e.what()));
  }
}

}  // namespace

namespace tok {
// Entry for tokenizer/vocab_import.cc (tokenizers described by plain vocabulary data).
std::shared_ptr<const Tokenizer::Impl> build_tokenizer(const json& root, BpeSource bpe) {
  try {
    return build(root, std::move(bpe));
  } catch (const json::exception& e) {
    throw Error(str("unexpected structure: ", e.what()));
  }
}
}  // namespace tok

Tokenizer Tokenizer::from_file(const std::string& path) {
  DFL_CHECK(file_exists(path), "tokenizer file not found: ", path);
  MappedFile file(path);
  const char* data = reinterpret_cast<const char*>(file.data());
  try {
    return Tokenizer(parse_and_build(data, data + file.size()));
  } catch (const Error& e) {
    throw Error(str(path, ": ", e.what()));
  }
}

Tokenizer Tokenizer::from_json_string(std::string_view j) {
  return Tokenizer(parse_and_build(j.data(), j.data() + j.size()));
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<std::string> pieces;
  auto model_pieces = [&](std::string_view segment) {
    pieces.clear();
    pre_tokenizer.split(segment, pieces);
    for (const std::string& p : pieces) model->tokenize(p, ids);
  };
  for (const tok::Segment& raw : added.split(text, /*normalized_set=*/false)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string norm = normalizer.apply(text.substr(raw.begin, raw.end - raw.begin));
    if (!added.has_normalized()) {
      model_pieces(norm);
      continue;
    }
    for (const tok::Segment& seg : added.split(norm, /*normalized_set=*/true)) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
      } else {
        model_pieces(std::string_view(norm).substr(seg.begin, seg.end - seg.begin));
      }
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (utf8::is_valid(text)) {
    impl_->encode_text(text, ids);
  } else {
    impl_->encode_text(utf8::lossy(text), ids);
  }
  if (add_special_tokens) ids = impl_->post_processor.apply(std::move(ids));
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    std::string_view piece;
    if (const std::string* a = impl_->added.decode_piece(id)) {
      piece = *a;
    } else if (!impl_->model->id_to_token(id, piece)) {
      continue;
    }
    if (skip_special_tokens && impl_->added.is_special_content(piece)) continue;
    tokens.emplace_back(piece);
  }
  return impl_->decoder.decode(std::move(tokens));
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  if (const std::string* a = impl_->added.decode_piece(id)) return *a;
  std::string_view p;
  return impl_->model->id_to_token(id, p) ? std::string(p) : std::string();
}

int32_t Tokenizer::piece_to_id(std::string_view piece) const {
  const int32_t id = impl_->added.token_to_id(piece);
  return id >= 0 ? id : impl_->model->token_to_id(piece);
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* a = impl_->added.find(id);
  return a != nullptr && a->special;
}

// ---- StreamDecoder ----

namespace {

constexpr size_t kMaxPending = 256;  // bound on held-back ids (only reached by invalid bytes)

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && std::string_view(s).substr(s.size() - 3) == utf8::kReplacement;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tok_(tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  pending_.push_back(id);
  std::vector<int32_t> all = context_;
  all.insert(all.end(), pending_.begin(), pending_.end());
  const std::string full = tok_.decode(all, skip_special_);
  if (full.size() <= context_text_.size()) return {};
  if (ends_with_replacement(full) && pending_.size() < kMaxPending) return {};
  if (full.compare(0, context_text_.size(), context_text_) != 0) return emit_pending();
  std::string out = full.substr(context_text_.size());
  context_ = std::move(pending_);
  pending_.clear();
  context_text_ = tok_.decode(context_, skip_special_);
  return out;
}

std::string StreamDecoder::emit_pending() {
  std::string out = tok_.decode(pending_, skip_special_);
  context_ = std::move(pending_);
  pending_.clear();
  context_text_ = out;
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  if (!pending_.empty()) {
    std::vector<int32_t> all = context_;
    all.insert(all.end(), pending_.begin(), pending_.end());
    const std::string full = tok_.decode(all, skip_special_);
    if (full.size() >= context_text_.size() &&
        full.compare(0, context_text_.size(), context_text_) == 0) {
      out = full.substr(context_text_.size());
    } else {
      out = tok_.decode(pending_, skip_special_);
    }
  }
  context_.clear();
  context_text_.clear();
  pending_.clear();
  return out;
}

}  // namespace dfl
