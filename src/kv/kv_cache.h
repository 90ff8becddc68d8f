// KV cache for several sequences, per layer, with truncation back to any earlier length.
//
// Layout per (sequence, layer): K [capacity, n_kv_heads, d_k], V [capacity, n_kv_heads, d_v] in
// fp32 and pos [capacity] (absolute position held by each slot, kEmptySlot when empty).
// A full layer stores position p in slot p (capacity = max context). A sliding layer is a ring:
// position p lives in slot p % capacity, with capacity = window + slack, where slack ≥ the
// largest block appended at once. Then writing a block never overwrites a key that any query
// of that block (or of a later step after rollback) can still see: query q needs keys
// ≥ q − window + 1, and the oldest key a block can overwrite is < its first position − window.
// Invariants: positions of one sequence are appended contiguously; truncate(seq, n) forgets
// positions ≥ n in every layer, which restores exactly the state of the accepted prefix
// (sliding rings included, as long as n ≥ length − slack).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/visibility.h"

namespace dfl {

struct KvLayerSpec {
  int32_t n_kv_heads = 0;
  int32_t d_k = 0;
  int32_t d_v = 0;
  int32_t window = 0;  // keys a sliding layer can see (0 = full layer: keeps everything)
};

// Bytes of K/V one sequence needs at `context` positions for this layout (fp32 storage):
// full layers grow with the context, sliding layers hold min(context, window + slack) slots.
int64_t kv_bytes_per_sequence(const std::vector<KvLayerSpec>& layers, int64_t context, int32_t slack);

class KvCache {
 public:
  KvCache() = default;
  // max_context: the most positions a sequence may hold; slack: the most positions appended
  // or rolled back at once (block size); n_seqs: sequences held side by side.
  KvCache(std::vector<KvLayerSpec> layers, int32_t n_seqs, int32_t max_context, int32_t slack);

  int32_t n_layers() const { return static_cast<int32_t>(layers_.size()); }
  int32_t n_seqs() const { return static_cast<int32_t>(seqs_.size()); }
  int32_t max_context() const { return max_context_; }
  int32_t slack() const { return slack_; }
  int32_t capacity(int32_t il) const { return caps_[il]; }
  const KvLayerSpec& layer(int32_t il) const { return layers_[il]; }

  // Number of positions held by `seq` (positions 0..length-1).
  int32_t length(int32_t seq) const { return seqs_[seq].length; }
  // Forgets positions ≥ n (n ≤ length). Rolling a sliding ring back by more than `slack` is a
  // programming error (asserted).
  void truncate(int32_t seq, int32_t n);
  void clear(int32_t seq) { truncate(seq, 0); seqs_[seq].length = 0; seqs_[seq].rollback_floor = 0; }

  // Slot of position `pos` in layer `il`.
  int32_t slot(int32_t il, int32_t pos) const { return layers_[il].window ? pos % caps_[il] : pos; }
  // Writes K/V rows for positions [pos0, pos0 + n) of layer il.   k: [n, n_kv, d_k]  v: [n, n_kv, d_v]
  void write(int32_t seq, int32_t il, int32_t pos0, int32_t n, const float* k, const float* v);
  // Marks positions up to `end` as held (call once per forward after writing every layer).
  void commit_length(int32_t seq, int32_t end);

  // Views for the attention kernel: all `capacity(il)` slots of the layer.
  const float* k(int32_t seq, int32_t il) const { return seqs_[seq].k[il].data(); }
  const float* v(int32_t seq, int32_t il) const { return seqs_[seq].v[il].data(); }
  const int32_t* pos(int32_t seq, int32_t il) const { return seqs_[seq].pos[il].data(); }
  // Slots worth scanning: full layers only up to the highest written position + 1.
  int32_t n_slots(int32_t seq, int32_t il) const;

  // Bytes of K/V storage one sequence needs at `context` positions: full layers grow with the
  // context, sliding rings are fixed at (window + slack) slots.
  int64_t bytes_per_sequence(int32_t context) const;

 private:
  struct Seq {
    int32_t length = 0;
    int32_t high_water = 0;      // one past the highest position written (≥ length)
    int32_t rollback_floor = 0;  // smallest length truncate may go back to
    std::vector<std::vector<float>> k, v;
    std::vector<std::vector<int32_t>> pos;
  };
  std::vector<KvLayerSpec> layers_;
  std::vector<int32_t> caps_;
  std::vector<Seq> seqs_;
  int32_t max_context_ = 0;
  int32_t slack_ = 0;
};

}  // namespace dfl
