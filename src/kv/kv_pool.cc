#include "kv/kv_pool.h"

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace dfl {

KvLayerSpec kv_layer_spec(bool sliding, Window window, int32_t n_kv_heads, int32_t d_k,
                          int32_t d_v) {
  return {n_kv_heads, d_k, d_v, sliding ? window.left + 1 : 0};
}

namespace {
// Slots of a sliding layer's ring: window + slack (or the whole context if shorter); bf16 rings
// are one head-major page, whose slot count is a multiple of 16 (kernels/ops.h KvPages).
int64_t ring_slots(int64_t window, int64_t slack, int64_t max_context, KvDtype dtype) {
  const int64_t cap = std::min(max_context, window + slack);
  return dtype == KvDtype::kBF16 ? (cap + 15) / 16 * 16 : cap;
}
}  // namespace

int64_t kv_bytes_per_sequence(const std::vector<KvLayerSpec>& layers, int64_t context, int32_t slack,
                              KvDtype dtype) {
  int64_t b = 0;
  for (const auto& l : layers) {
    const int64_t slots = l.window ? ring_slots(l.window, slack, context, dtype) : context;
    b += slots * l.n_kv_heads * (l.d_k + l.d_v) * kv_dtype_bytes(dtype);
  }
  return b;
}

KvPool::KvPool(std::vector<KvLayerSpec> layers, const KvPoolOptions& opts)
    : layers_(std::move(layers)), opts_(opts) {
  DFL_ASSERT(opts.max_context > 0 && opts.slack > 0 && opts.max_seqs > 0);
  DFL_ASSERT(opts.block_slots > 0 && opts.block_slots % 16 == 0);
  const int32_t bs = opts.block_slots;
  const int64_t per_seq = (opts.max_context + bs - 1) / bs;
  n_blocks_ = opts.n_blocks > 0 ? opts.n_blocks : per_seq * opts.max_seqs;
  for (const auto& l : layers_) n_full_ += l.window == 0;
  if (!n_full_) n_blocks_ = 0;
  const bool bf16 = opts.dtype == KvDtype::kBF16;
  DFL_ASSERT(bf16 || opts.dtype == KvDtype::kF32);
  k_.resize(layers_.size());
  v_.resize(layers_.size());
  k16_.resize(layers_.size());
  v16_.resize(layers_.size());
  ring_pos_.resize(layers_.size());
  ring_cap_.assign(layers_.size(), 0);
  // Storage is mapped lazily by the OS (HugeArray): untouched pages cost no memory.
  for (size_t il = 0; il < layers_.size(); ++il) {
    const auto& l = layers_[il];
    const size_t kr = size_t(l.n_kv_heads) * l.d_k, vr = size_t(l.n_kv_heads) * l.d_v;
    size_t slots = 0;
    if (l.window) {
      const int32_t cap = int32_t(ring_slots(l.window, opts.slack, opts.max_context, opts.dtype));
      ring_cap_[il] = cap;
      slots = size_t(opts.max_seqs) * cap;
      ring_pos_[il] = HugeArray<int32_t>(slots, kEmptySlot);
    } else {
      slots = size_t(n_blocks_) * bs;
    }
    if (bf16) {
      k16_[il].reset(slots * kr);
      v16_[il].reset(slots * vr);
    } else {
      k_[il].reset(slots * kr);
      v_[il].reset(slots * vr);
    }
  }
  page_pos_ = HugeArray<int32_t>(size_t(n_blocks_) * bs, kEmptySlot);
  free_.resize(n_blocks_);
  for (int64_t b = 0; b < n_blocks_; ++b) free_[b] = static_cast<int32_t>(n_blocks_ - 1 - b);
  seqs_.resize(opts.max_seqs);
  for (auto& s : seqs_) s.blocks.reserve(per_seq);
}

size_t KvPool::ring_k_off(int32_t seq, int32_t il) const {
  const auto& l = layers_[il];
  return size_t(seq) * ring_cap_[il] * l.n_kv_heads * l.d_k;
}
size_t KvPool::ring_v_off(int32_t seq, int32_t il) const {
  const auto& l = layers_[il];
  return size_t(seq) * ring_cap_[il] * l.n_kv_heads * l.d_v;
}

// One slot row of a bf16 page (or ring) of `page_slots` rows, from fp32 k [n_kv, d_k] and
// v [n_kv, d_v], in the head-major layout of kernels/ops.h KvPages.
void KvPool::write_bf16_row(int32_t il, uint16_t* kpage, uint16_t* vpage, int32_t page_slots,
                            int32_t row, const float* k, const float* v) {
  const KvLayerSpec& l = layers_[il];
  for (int32_t h = 0; h < l.n_kv_heads; ++h) {
    uint16_t* kd = kpage + kv_bf16_k_index(page_slots, l.d_k, h, row, 0);
    ops::to_bf16(k + size_t(h) * l.d_k, l.d_k, kd);
    uint16_t* vd = vpage + kv_bf16_v_index(page_slots, l.d_v, h, row, 0);
    ops::to_bf16(v + size_t(h) * l.d_v, l.d_v, vd, 2);
  }
}
int32_t* KvPool::ring_pos(int32_t seq, int32_t il) const {
  return const_cast<int32_t*>(ring_pos_[il].data()) + size_t(seq) * ring_cap_[il];
}

int64_t KvPool::blocks_needed(int32_t seq, int32_t end) const {
  if (!n_full_) return 0;
  const int64_t want = (int64_t(end) + opts_.block_slots - 1) / opts_.block_slots;
  return std::max<int64_t>(0, want - int64_t(seqs_[seq].blocks.size()));
}

bool KvPool::ensure(int32_t seq, int32_t end) {
  DFL_ASSERT(end <= opts_.max_context);
  const int64_t need = blocks_needed(seq, end);
  if (need > blocks_free()) return false;
  Seq& s = seqs_[seq];
  const int32_t bs = opts_.block_slots;
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    std::fill_n(page_pos_.data() + size_t(b) * bs, bs, kEmptySlot);
    s.blocks.push_back(b);
  }
  return true;
}

void KvPool::write(int32_t seq, int32_t il, int32_t pos0, int32_t n, const float* k,
                   const float* v) {
  Seq& s = seqs_[seq];
  const KvLayerSpec& l = layers_[il];
  DFL_ASSERT(pos0 >= 0 && pos0 + n <= opts_.max_context);
  const size_t kr = size_t(l.n_kv_heads) * l.d_k, vr = size_t(l.n_kv_heads) * l.d_v;
  const bool bf16 = opts_.dtype == KvDtype::kBF16;
  if (l.window) {
    DFL_ASSERT(n <= opts_.slack);
    const int32_t cap = ring_cap_[il];
    const size_t ko = ring_k_off(seq, il), vo = ring_v_off(seq, il);
    int32_t* rp = ring_pos(seq, il);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t p = pos0 + i, sl = p % cap;
      if (bf16) {
        write_bf16_row(il, k16_[il].data() + ko, v16_[il].data() + vo, cap, sl, k + i * kr, v + i * vr);
      } else {
        std::memcpy(k_[il].data() + ko + sl * kr, k + i * kr, kr * sizeof(float));
        std::memcpy(v_[il].data() + vo + sl * vr, v + i * vr, vr * sizeof(float));
      }
      rp[sl] = p;
    }
  } else {
    const int32_t bs = opts_.block_slots;
    DFL_ASSERT(int64_t(pos0 + n) <= int64_t(s.blocks.size()) * bs);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t p = pos0 + i;
      const size_t page = size_t(s.blocks[p / bs]), slot = page * bs + p % bs;
      if (bf16) {
        write_bf16_row(il, k16_[il].data() + page * bs * kr, v16_[il].data() + page * bs * vr, bs,
                       p % bs, k + i * kr, v + i * vr);
      } else {
        std::memcpy(k_[il].data() + slot * kr, k + i * kr, kr * sizeof(float));
        std::memcpy(v_[il].data() + slot * vr, v + i * vr, vr * sizeof(float));
      }
      page_pos_[slot] = p;
    }
  }
  s.high_water = std::max(s.high_water, pos0 + n);
}

void KvPool::commit_length(int32_t seq, int32_t end) {
  Seq& s = seqs_[seq];
  DFL_ASSERT(end >= s.length);
  s.length = end;
  s.rollback_floor = std::max(0, s.high_water - opts_.slack);
}

void KvPool::truncate(int32_t seq, int32_t n) {
  Seq& s = seqs_[seq];
  DFL_ASSERT(n >= 0 && n <= std::max(s.high_water, s.length));
  const int32_t bs = opts_.block_slots;
  bool has_ring = false;
  for (size_t il = 0; il < layers_.size(); ++il) {
    if (!layers_[il].window) continue;
    has_ring = true;
    int32_t* rp = ring_pos(seq, int32_t(il));
    for (int32_t i = 0; i < ring_cap_[il]; ++i)
      if (rp[i] >= n) rp[i] = kEmptySlot;
  }
  DFL_ASSERT(!has_ring || n == 0 || n >= s.rollback_floor);
  if (n_full_) {
    for (int32_t p = n; p < s.high_water && p / bs < int32_t(s.blocks.size()); ++p)
      page_pos_[size_t(s.blocks[p / bs]) * bs + p % bs] = kEmptySlot;
    const size_t keep = (size_t(n) + bs - 1) / bs;
    while (s.blocks.size() > keep) {
      free_.push_back(s.blocks.back());
      s.blocks.pop_back();
    }
  }
  s.length = std::min(s.length, n);
  s.high_water = n;
}

void KvPool::clear(int32_t seq) {
  truncate(seq, 0);
  Seq& s = seqs_[seq];
  s.length = s.high_water = s.rollback_floor = 0;
}

KvPages KvPool::view(int32_t seq, int32_t il, KvViewScratch& sc) const {
  const KvLayerSpec& l = layers_[il];
  KvPages p;
  const bool bf16 = opts_.dtype == KvDtype::kBF16;
  sc.k.clear();
  sc.v.clear();
  sc.k16.clear();
  sc.v16.clear();
  sc.pos.clear();
  if (l.window) {
    if (bf16) {
      sc.k16.push_back(k16_[il].data() + ring_k_off(seq, il));
      sc.v16.push_back(v16_[il].data() + ring_v_off(seq, il));
    } else {
      sc.k.push_back(k_[il].data() + ring_k_off(seq, il));
      sc.v.push_back(v_[il].data() + ring_v_off(seq, il));
    }
    sc.pos.push_back(ring_pos(seq, il));
    p.n_slots = ring_cap_[il];
    p.page_slots = ring_cap_[il];
  } else {
    const Seq& s = seqs_[seq];
    const int32_t bs = opts_.block_slots;
    p.n_slots = std::min<int64_t>(s.high_water, int64_t(s.blocks.size()) * bs);
    p.page_slots = bs;
    const size_t kr = size_t(l.n_kv_heads) * l.d_k, vr = size_t(l.n_kv_heads) * l.d_v;
    const int64_t n_pages = (p.n_slots + bs - 1) / bs;
    for (int64_t i = 0; i < n_pages; ++i) {
      const size_t b = size_t(s.blocks[i]);
      if (bf16) {
        sc.k16.push_back(k16_[il].data() + b * bs * kr);
        sc.v16.push_back(v16_[il].data() + b * bs * vr);
      } else {
        sc.k.push_back(k_[il].data() + b * bs * kr);
        sc.v.push_back(v_[il].data() + b * bs * vr);
      }
      sc.pos.push_back(page_pos_.data() + b * bs);
    }
  }
  p.dtype = opts_.dtype;
  p.k = sc.k.data();
  p.v = sc.v.data();
  p.k16 = sc.k16.data();
  p.v16 = sc.v16.data();
  p.pos = sc.pos.data();
  return p;
}

int64_t KvPool::bytes_per_block() const {
  int64_t b = 0;
  for (const auto& l : layers_)
    if (!l.window) b += int64_t(opts_.block_slots) * l.n_kv_heads * (l.d_k + l.d_v) * elem_bytes();
  return b;
}

int64_t KvPool::ring_bytes_per_seq() const {
  int64_t b = 0;
  for (size_t il = 0; il < layers_.size(); ++il)
    if (layers_[il].window)
      b += int64_t(ring_cap_[il]) * layers_[il].n_kv_heads * (layers_[il].d_k + layers_[il].d_v) *
           elem_bytes();
  return b;
}

int64_t KvPool::bytes_total() const {
  return n_blocks_ * bytes_per_block() + int64_t(seqs_.size()) * ring_bytes_per_seq();
}

int64_t KvPool::bytes_per_sequence(int32_t context) const {
  const int64_t pages = (int64_t(std::min(context, opts_.max_context)) + opts_.block_slots - 1) /
                        opts_.block_slots;
  return pages * bytes_per_block() + ring_bytes_per_seq();
}

}  // namespace dfl
