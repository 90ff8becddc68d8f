// Flat open-addressing tables for the BPE vocabulary and merges.
//
// Loading Gemma 3 (262k tokens, 515k merges) with node-based std::unordered_map spent seconds in
// allocation; these tables are a handful of contiguous arrays built in one pass.
// StringIds: string -> id over an arena; PairMap: (id, id) -> (rank, new id). Both are
// insert-only, and a repeated key overwrites its value (last wins, as HF's HashMap collect).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dfl::tok {

inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

inline uint64_t hash_bytes(std::string_view s) {  // FNV-1a, then mixed
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return mix64(h);
}

class StringIds {
 public:
  void reserve(size_t n, size_t bytes) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap <<= 1;
    slots_.assign(cap, -1);
    off_.reserve(n + 1);
    ids_.reserve(n);
    arena_.reserve(bytes);
    if (off_.empty()) off_.push_back(0);
  }
  // Inserts or overwrites; returns the entry index of `s`.
  int32_t insert(std::string_view s, int32_t id) {
    if (off_.empty()) reserve(8, 64);
    if (2 * (ids_.size() + 1) > slots_.size()) grow();
    size_t h = hash_bytes(s) & (slots_.size() - 1);
    while (slots_[h] >= 0) {
      if (key(slots_[h]) == s) {
        ids_[slots_[h]] = id;
        return slots_[h];
      }
      h = (h + 1) & (slots_.size() - 1);
    }
    const auto e = static_cast<int32_t>(ids_.size());
    arena_.append(s);
    off_.push_back(static_cast<uint32_t>(arena_.size()));
    ids_.push_back(id);
    slots_[h] = e;
    return e;
  }
  int32_t find(std::string_view s) const {  // id or -1
    if (slots_.empty()) return -1;
    size_t h = hash_bytes(s) & (slots_.size() - 1);
    while (slots_[h] >= 0) {
      if (key(slots_[h]) == s) return ids_[slots_[h]];
      h = (h + 1) & (slots_.size() - 1);
    }
    return -1;
  }
  size_t size() const { return ids_.size(); }
  std::string_view key(int32_t e) const {
    return std::string_view(arena_).substr(off_[e], off_[e + 1] - off_[e]);
  }
  int32_t id(int32_t e) const { return ids_[e]; }

 private:
  void grow() {
    std::vector<int32_t> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, -1);
    for (int32_t e = 0; e < static_cast<int32_t>(ids_.size()); ++e) {
      size_t h = hash_bytes(key(e)) & (slots_.size() - 1);
      while (slots_[h] >= 0) h = (h + 1) & (slots_.size() - 1);
      slots_[h] = e;
    }
  }
  std::string arena_;
  std::vector<uint32_t> off_;  // entry e spans arena_[off_[e], off_[e+1])
  std::vector<int32_t> ids_;
  std::vector<int32_t> slots_;  // entry index or -1
};

class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t new_id;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, Value{0, 0});
    count_ = 0;
  }
  void insert(int32_t a, int32_t b, Value v) {
    if (keys_.empty() || 2 * (count_ + 1) > keys_.size()) rehash(keys_.empty() ? 16 : keys_.size() * 2);
    const uint64_t k = key(a, b);
    size_t h = mix64(k) & (keys_.size() - 1);
    while (keys_[h] != kEmpty && keys_[h] != k) h = (h + 1) & (keys_.size() - 1);
    if (keys_[h] == kEmpty) ++count_;
    keys_[h] = k;
    vals_[h] = v;
  }
  const Value* find(int32_t a, int32_t b) const {
    if (keys_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    size_t h = mix64(k) & (keys_.size() - 1);
    while (keys_[h] != kEmpty) {
      if (keys_[h] == k) return &vals_[h];
      h = (h + 1) & (keys_.size() - 1);
    }
    return nullptr;
  }

 private:
  static constexpr uint64_t kEmpty = ~0ULL;  // ids are < 2^31 - 1, so no real key is all ones
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void rehash(size_t cap) {
    std::vector<uint64_t> ok;
    std::vector<Value> ov;
    ok.swap(keys_);
    ov.swap(vals_);
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, Value{0, 0});
    count_ = 0;
    for (size_t i = 0; i < ok.size(); ++i) {
      if (ok[i] != kEmpty) {
        insert(static_cast<int32_t>(ok[i] >> 32), static_cast<int32_t>(ok[i] & 0xffffffffu), ov[i]);
      }
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<Value> vals_;
  size_t count_ = 0;
};

}  // namespace dfl::tok
