#include "tokenizer/bpe.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dfl::tok {

using json = nlohmann::json;

namespace {

std::optional<std::string> optional_string(const json& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return std::nullopt;
  DFL_CHECK(it->is_string(), "tokenizer.json: model.", key, " must be a string or null");
  return it->get<std::string>();
}

bool optional_bool(const json& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return false;
  DFL_CHECK(it->is_boolean(), "tokenizer.json: model.", key, " must be a boolean");
  return it->get<bool>();
}

// One symbol of a word being merged: a doubly linked list over a vector (HF's Word).
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes of the original word covered; 0 once merged into its left neighbour
};

struct QueuedMerge {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};

// Heap order: lowest rank first, then leftmost position.
struct MergeAfter {
  bool operator()(const QueuedMerge& a, const QueuedMerge& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

Bpe::Bpe(const json& m, BpeSource src) {
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  DFL_CHECK(m.is_object(), "tokenizer.json: \"model\" must be an object");
  if (auto it = m.find("dropout"); it != m.end() && !it->is_null()) {
    DFL_CHECK(it->is_number() && it->get<double>() == 0.0,
              "tokenizer.json: BPE dropout is not supported (tokenization would be random)");
  }
  DFL_CHECK(src.error.empty(), "tokenizer.json: ", src.error);
  DFL_CHECK(src.has_vocab, "tokenizer.json: model.vocab is missing or not an object");
  DFL_CHECK(src.has_merges, "tokenizer.json: model.merges is missing or not an array");
  size_t bytes = 0;
  for (const auto& [token, id] : src.vocab) bytes += token.size();
  vocab_.reserve(src.vocab.size(), bytes);
  for (const auto& [token, id] : src.vocab) {
    DFL_CHECK(id >= 0 && id < std::numeric_limits<int32_t>::max(), "tokenizer.json: model.vocab id ",
              id, " of '", token, "' is out of range");
    vocab_.insert(token, static_cast<int32_t>(id));
  }
  // Reverse map from the final entries (a repeated token keeps its last id, as in HF).
  by_id_.reserve(vocab_.size());
  for (int32_t e = 0; e < static_cast<int32_t>(vocab_.size()); ++e) {
    by_id_.emplace_back(vocab_.id(e), e);
    max_id_ = std::max(max_id_, vocab_.id(e));
  }
  std::stable_sort(by_id_.begin(), by_id_.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  src.vocab = {};

  unk_token_ = optional_string(m, "unk_token");
  continuing_subword_prefix_ = optional_string(m, "continuing_subword_prefix");
  end_of_word_suffix_ = optional_string(m, "end_of_word_suffix");
  fuse_unk_ = optional_bool(m, "fuse_unk");
  byte_fallback_ = optional_bool(m, "byte_fallback");
  ignore_merges_ = optional_bool(m, "ignore_merges");
  ignore_merges_runs_of_ = optional_string(m, "ignore_merges_runs_of").value_or("");
  if (unk_token_) {
    DFL_CHECK(vocab_.find(*unk_token_) >= 0, "tokenizer.json: model.unk_token '", *unk_token_,
              "' is not in the vocab");
  }
  if (byte_fallback_) {
    static const char* kHex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const std::string name = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      byte_ids_[b] = token_to_id(name);
    }
  }

  merges_.reserve(src.merges.size());
  size_t rank = 0;
  for (const BpeSource::Merge& e : src.merges) {
    if (e.legacy) {
      // Legacy form "a b": exactly one space; "#version" lines are comments.
      const std::string& line = e.a;
      if (line.rfind("#version", 0) == 0) continue;
      const size_t sp = line.find(' ');
      DFL_CHECK(sp != std::string::npos && line.find(' ', sp + 1) == std::string::npos,
                "tokenizer.json: merge ", rank + 1, " ('", line, "') is not of the form 'a b'");
      add_merge(rank, line.substr(0, sp), line.substr(sp + 1));
    } else {
      add_merge(rank, e.a, e.b);
    }
    ++rank;
  }
}

void Bpe::add_merge(size_t rank, const std::string& a, const std::string& b) {
  const int32_t a_id = token_to_id(a), b_id = token_to_id(b);
  DFL_CHECK(a_id >= 0, "tokenizer.json: merge ", rank + 1, " uses '", a, "' which is not in the vocab");
  DFL_CHECK(b_id >= 0, "tokenizer.json: merge ", rank + 1, " uses '", b, "' which is not in the vocab");
  const size_t prefix_len = continuing_subword_prefix_ ? continuing_subword_prefix_->size() : 0;
  DFL_CHECK(b.size() >= prefix_len, "tokenizer.json: merge ", rank + 1,
            " has a right part shorter than continuing_subword_prefix");
  std::string merged;
  merged.reserve(a.size() + b.size());
  merged.append(a).append(b, prefix_len, std::string::npos);
  const int32_t new_id = token_to_id(merged);
  DFL_CHECK(new_id >= 0, "tokenizer.json: merge ", rank + 1, " makes '", merged,
            "' which is not in the vocab");
  // A repeated pair keeps the later rank, as HF's HashMap collect does.
  merges_.insert(a_id, b_id, MergeInfo{static_cast<int32_t>(rank), new_id});
}

int32_t Bpe::token_to_id(std::string_view token) const { return vocab_.find(token); }

bool Bpe::id_to_token(int32_t id, std::string_view& token) const {
  auto it = std::upper_bound(by_id_.begin(), by_id_.end(), id,
                             [](int32_t v, const auto& p) { return v < p.first; });
  if (it == by_id_.begin() || (it - 1)->first != id) return false;
  token = vocab_.key((it - 1)->second);
  return true;
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_ ||
      (!ignore_merges_runs_of_.empty() && word.find_first_not_of(ignore_merges_runs_of_) == std::string_view::npos)) {
    const int32_t id = token_to_id(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheMaxWordLen;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + start, out.end()));
    }
  }
}

void Bpe::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  sym.reserve(w.size());
  auto add = [&sym](int32_t id, size_t len) {
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{id, n - 1, n + 1, static_cast<uint32_t>(len)});
  };

  // Pending unknown: (id, byte length), emitted lazily so consecutive unknowns can fuse.
  bool have_unk = false;
  int32_t unk_id = -1;
  size_t unk_len = 0;
  const int32_t unk_vocab_id = unk_token_ ? token_to_id(*unk_token_) : -1;
  std::string buf;
  size_t i = 0;
  while (i < w.size()) {
    const size_t n = std::min(utf8::char_len(static_cast<unsigned char>(w[i])), w.size() - i);
    const bool is_first = i == 0, is_last = i + n >= w.size();
    std::string_view s = w.substr(i, n);
    if ((!is_first && continuing_subword_prefix_) || (is_last && end_of_word_suffix_)) {
      buf.clear();
      if (!is_first && continuing_subword_prefix_) buf += *continuing_subword_prefix_;
      buf += s;
      if (is_last && end_of_word_suffix_) buf += *end_of_word_suffix_;
      s = buf;
    }
    const int32_t id = token_to_id(s);
    if (id >= 0) {
      if (have_unk) {
        add(unk_id, unk_len);
        have_unk = false;
      }
      add(id, n);
    } else {
      bool done = false;
      if (byte_fallback_) {
        // Every byte of the (possibly prefixed) piece must have a <0xNN> token. Like HF, a pending
        // unk is not flushed first, so it lands after these byte tokens.
        bool all = true;
        for (unsigned char b : s) all = all && byte_ids_[b] >= 0;
        if (all) {
          for (unsigned char b : s) add(byte_ids_[b], 1);
          done = true;
        }
      }
      if (!done && unk_token_) {
        if (have_unk && fuse_unk_) {
          unk_len += n;
        } else {
          if (have_unk) add(unk_id, unk_len);
          have_unk = true;
          unk_id = unk_vocab_id;
          unk_len = n;
        }
      }
    }
    i += n;
  }
  if (have_unk) add(unk_id, unk_len);
  if (sym.empty()) return;
  sym.back().next = -1;

  std::vector<QueuedMerge> heap;
  heap.reserve(sym.size());
  auto lookup = [this](int32_t a, int32_t b) -> const MergeInfo* { return merges_.find(a, b); };
  for (size_t k = 0; k + 1 < sym.size(); ++k) {
    if (const MergeInfo* mi = lookup(sym[k].id, sym[k + 1].id)) {
      heap.push_back({mi->rank, static_cast<int32_t>(k), mi->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), MergeAfter{});
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), MergeAfter{});
    const QueuedMerge top = heap.back();
    heap.pop_back();
    Symbol& cur = sym[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const int32_t next_pos = cur.next;
    const Symbol right = sym[next_pos];
    // Stale entry: the pair at this position changed since it was queued.
    const MergeInfo* now = lookup(cur.id, right.id);
    if (now == nullptr || now->new_id != top.new_id) continue;

    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    sym[next_pos].len = 0;
    if (right.next >= 0 && right.next < static_cast<int32_t>(sym.size())) {
      sym[right.next].prev = top.pos;
    }
    if (cur.prev >= 0) {
      if (const MergeInfo* mi = lookup(sym[cur.prev].id, cur.id)) {
        heap.push_back({mi->rank, cur.prev, mi->new_id});
        std::push_heap(heap.begin(), heap.end(), MergeAfter{});
      }
    }
    if (cur.next >= 0 && cur.next < static_cast<int32_t>(sym.size())) {
      if (const MergeInfo* mi = lookup(cur.id, sym[cur.next].id)) {
        heap.push_back({mi->rank, top.pos, mi->new_id});
        std::push_heap(heap.begin(), heap.end(), MergeAfter{});
      }
    }
  }
  for (const Symbol& s : sym) {
    if (s.len != 0) out.push_back(s.id);
  }
}

}  // namespace dfl::tok
