#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace dfl {

KvCache::KvCache(std::vector<KvLayerSpec> layers, int32_t n_seqs, int32_t max_context,
                 int32_t slack)
    : layers_(std::move(layers)), seqs_(n_seqs), max_context_(max_context), slack_(slack) {
  DFL_ASSERT(max_context > 0 && slack > 0 && n_seqs > 0);
  for (const auto& l : layers_) {
    caps_.push_back(l.window ? std::min(max_context, l.window + slack) : max_context);
  }
  for (auto& s : seqs_) {
    s.k.resize(layers_.size());
    s.v.resize(layers_.size());
    s.pos.resize(layers_.size());
    for (size_t il = 0; il < layers_.size(); ++il) {
      const auto& l = layers_[il];
      // Rings are allocated whole; full layers grow with the sequence (see reserve_slots).
      const int32_t n = l.window ? caps_[il] : 0;
      s.k[il].assign(static_cast<size_t>(n) * l.n_kv_heads * l.d_k, 0.0f);
      s.v[il].assign(static_cast<size_t>(n) * l.n_kv_heads * l.d_v, 0.0f);
      s.pos[il].assign(n, kEmptySlot);
    }
  }
}

void KvCache::write(int32_t seq, int32_t il, int32_t pos0, int32_t n, const float* k,
                    const float* v) {
  Seq& s = seqs_[seq];
  const KvLayerSpec& l = layers_[il];
  DFL_ASSERT(pos0 >= 0 && pos0 + n <= max_context_);
  DFL_ASSERT(!l.window || n <= slack_);
  const size_t kr = static_cast<size_t>(l.n_kv_heads) * l.d_k;
  const size_t vr = static_cast<size_t>(l.n_kv_heads) * l.d_v;
  if (!l.window && static_cast<int32_t>(s.pos[il].size()) < pos0 + n) {
    // Grow geometrically so a long generation reallocates O(log n) times.
    const size_t want = std::min<size_t>(max_context_, std::max<size_t>(pos0 + n, s.pos[il].size() * 2));
    s.k[il].resize(want * kr, 0.0f);
    s.v[il].resize(want * vr, 0.0f);
    s.pos[il].resize(want, kEmptySlot);
  }
  for (int32_t i = 0; i < n; ++i) {
    const int32_t p = pos0 + i;
    const int32_t sl = slot(il, p);
    std::memcpy(s.k[il].data() + sl * kr, k + i * kr, kr * sizeof(float));
    std::memcpy(s.v[il].data() + sl * vr, v + i * vr, vr * sizeof(float));
    s.pos[il][sl] = p;
  }
  s.high_water = std::max(s.high_water, pos0 + n);
}

void KvCache::commit_length(int32_t seq, int32_t end) {
  Seq& s = seqs_[seq];
  DFL_ASSERT(end >= s.length);
  s.length = end;
  // A sliding ring can roll back at most `slack` positions behind the newest write.
  s.rollback_floor = std::max(0, s.high_water - slack_);
}

void KvCache::truncate(int32_t seq, int32_t n) {
  Seq& s = seqs_[seq];
  DFL_ASSERT(n >= 0 && n <= s.high_water);
  bool has_ring = false;
  for (size_t il = 0; il < layers_.size(); ++il) {
    if (!layers_[il].window) {
      const int32_t end = std::min<int32_t>(s.high_water, static_cast<int32_t>(s.pos[il].size()));
      for (int32_t p = n; p < end; ++p) s.pos[il][p] = kEmptySlot;
    } else {
      has_ring = true;
      for (auto& p : s.pos[il])
        if (p >= n) p = kEmptySlot;
    }
  }
  DFL_ASSERT(!has_ring || n == 0 || n >= s.rollback_floor);
  s.length = std::min(s.length, n);
  s.high_water = n;
}

int32_t KvCache::n_slots(int32_t seq, int32_t il) const {
  if (layers_[il].window) return caps_[il];
  return std::min<int32_t>(seqs_[seq].high_water, static_cast<int32_t>(seqs_[seq].pos[il].size()));
}

int64_t kv_bytes_per_sequence(const std::vector<KvLayerSpec>& layers, int64_t context, int32_t slack) {
  int64_t b = 0;
  for (const auto& l : layers) {
    const int64_t slots = l.window ? std::min<int64_t>(context, l.window + slack) : context;
    b += slots * l.n_kv_heads * (l.d_k + l.d_v) * static_cast<int64_t>(sizeof(float));
  }
  return b;
}

int64_t KvCache::bytes_per_sequence(int32_t context) const {
  return kv_bytes_per_sequence(layers_, std::min(context, max_context_), slack_);
}

}  // namespace dfl
