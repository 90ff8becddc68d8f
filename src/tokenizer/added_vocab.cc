#include "tokenizer/added_vocab.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"

#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace dfl::tok {

namespace {

bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Rust regex `\w` (Unicode): letters, marks, decimal digits, connector punctuation, joiners.
// Letter-like numbers (Nl) count too, as they are Alphabetic.
bool is_word_char(uint32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Start of the last character of s (s non-empty, well-formed).
size_t last_char_start(std::string_view s) {
  size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return k;
}

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t k = last_char_start(s);
  return is_word_char(utf8::next(s, k));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t k = 0;
  return is_word_char(utf8::next(s, k));
}

// Offset where the trailing White_Space run of s begins.
size_t trailing_space_start(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    size_t k = last_char_start(s.substr(0, e));
    size_t kk = k;
    if (!is_white_space(utf8::next(s, kk))) break;
    e = k;
  }
  return e;
}

// Length of the leading White_Space run of s.
size_t leading_space_len(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    size_t k = b;
    if (!is_white_space(utf8::next(s, k))) break;
    b = k;
  }
  return b;
}

}  // namespace

void AddedVocab::Trie::insert(std::string_view key, int32_t id) {
  if (nodes.empty()) {
    nodes.emplace_back();
    std::fill(std::begin(root_table), std::end(root_table), -1);
  }
  int32_t cur = 0;
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    int32_t nxt = -1;
    if (cur == 0) {
      nxt = root_table[c];
    } else {
      for (const auto& [ch, child] : nodes[cur].children) {
        if (ch == c) nxt = child;
      }
    }
    if (nxt < 0) {
      nxt = static_cast<int32_t>(nodes.size());
      nodes.emplace_back();
      if (cur == 0) root_table[c] = nxt;
      else nodes[cur].children.emplace_back(c, nxt);
    }
    cur = nxt;
  }
  if (nodes[cur].token < 0) ++n_tokens;
  if (nodes[cur].token < 0) nodes[cur].token = id;  // first pattern wins, like Aho-Corasick
}

size_t AddedVocab::Trie::longest_at(std::string_view text, size_t pos, int32_t& id) const {
  if (nodes.empty()) return 0;
  size_t best = 0;
  int32_t cur = root_table[static_cast<unsigned char>(text[pos])];
  size_t i = pos + 1;
  while (cur >= 0) {
    if (nodes[cur].token >= 0) {
      best = i - pos;
      id = nodes[cur].token;
    }
    if (i >= text.size()) break;
    const auto c = static_cast<unsigned char>(text[i]);
    int32_t nxt = -1;
    for (const auto& [ch, child] : nodes[cur].children) {
      if (ch == c) {
        nxt = child;
        break;
      }
    }
    cur = nxt;
    ++i;
  }
  return best;
}

void AddedVocab::build(const std::vector<AddedToken>& tokens, const Normalizer& normalizer,
                       bool has_normalizer, const Bpe& model) {
  const auto model_size = static_cast<int64_t>(model.vocab_count());
  for (const AddedToken& file_token : tokens) {
    if (file_token.content.empty()) continue;
    if (auto it = by_content_.find(file_token.content); it != by_content_.end()) {
      const AddedToken* old = find(it->second);
      if (old && old->single_word == file_token.single_word && old->lstrip == file_token.lstrip &&
          old->rstrip == file_token.rstrip && old->normalized == file_token.normalized &&
          old->special == file_token.special && old->content == file_token.content) {
        continue;  // exact repeat
      }
    }
    int32_t id = token_to_id(file_token.content);
    if (id < 0) id = model.token_to_id(file_token.content);
    if (id < 0) {
      const int64_t next = max_id_ < 0 ? model_size
                           : (max_id_ >= model_size || model_size == 0) ? int64_t{max_id_} + 1
                                                                        : model_size;
      DFL_CHECK(next < INT32_MAX, "tokenizer.json: too many added tokens");
      id = static_cast<int32_t>(next);
    }
    AddedToken t = file_token;
    t.id = id;
    if (t.normalized && has_normalizer) {
      std::string norm = normalizer.apply(t.content);
      if (norm != t.content) {
        normalized_form_[id] = std::move(norm);
      } else {
        normalized_form_.erase(id);
      }
    }
    by_content_[t.content] = id;
    if (t.special) special_contents_.insert(t.content);
    max_id_ = std::max(max_id_, id);
    by_id_[id] = std::move(t);
  }
  // Matchers over the final id -> token table, in id order so duplicates resolve the same way
  // on every run (HF iterates a hash map here; duplicate patterns do not occur in real files).
  std::vector<int32_t> ids;
  ids.reserve(by_id_.size());
  for (const auto& [id, t] : by_id_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (int32_t id : ids) {
    const AddedToken& t = by_id_[id];
    if (t.normalized) {
      const std::string* p = decode_piece(id);
      if (!p->empty()) tries_[1].insert(*p, id);
    } else {
      tries_[0].insert(t.content, id);
    }
  }
}

const std::string* AddedVocab::decode_piece(int32_t id) const {
  auto n = normalized_form_.find(id);
  if (n != normalized_form_.end()) return &n->second;
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second.content;
}

int32_t AddedVocab::token_to_id(std::string_view content) const {
  auto it = by_content_.find(content);
  return it == by_content_.end() ? -1 : it->second;
}

const AddedToken* AddedVocab::find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

std::vector<Segment> AddedVocab::split(std::string_view s, bool normalized_set) const {
  std::vector<Segment> out;
  const Trie& trie = tries_[normalized_set ? 1 : 0];
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < s.size() && trie.n_tokens > 0) {
    int32_t id = -1;
    const size_t len = trie.longest_at(s, pos, id);
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // the matcher moves on even if the match is discarded below
    const AddedToken* tok = find(id);
    if (tok->single_word) {
      const bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      const bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (tok->lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
    if (tok->rstrip) stop += leading_space_len(s.substr(stop));
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, id});
    start_offset = stop;
  }
  if (start_offset < s.size()) out.push_back({start_offset, s.size(), -1});
  if (s.empty()) out.push_back({0, 0, -1});
  return out;
}

}  // namespace dfl::tok
