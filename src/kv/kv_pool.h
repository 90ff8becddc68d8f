// The KV pool of one model: a fixed budget of K/V storage shared by up to `max_seqs` sequences,
// with truncation of any sequence back to an earlier length (speculative rollback).
//
// Two kinds of layer state, chosen per layer by its KvLayerSpec:
//   full attention   block-paged (vLLM's block manager): storage is n_blocks pages of
//                    `block_slots` slots per layer; each sequence has ONE block table shared by
//                    all its full layers (block b of the sequence holds positions
//                    [b·block_slots, (b+1)·block_slots) in every full layer). Pages come from a
//                    free list and go back on truncate / clear.
//   sliding window   a ring per (sequence slot, layer) of window + slack slots, allocated up front
//                    for every slot: position p lives in ring slot p % capacity. With slack ≥ the
//                    largest block appended at once, writing a block never overwrites a key any
//                    query of that block (or of a later step after rollback) can still see:
//                    query q needs keys ≥ q − window + 1, and the oldest key a block can overwrite
//                    is < its first position − window.
// The third kind, Gated DeltaNet's recurrent state, lives beside the pool in
// kv/recurrent_state.h (two buffers per slot + replay rows; rolled back by replay, not snapshots);
// CausalLM::rollback / release (model/model.h) apply truncate / clear to every kind at once.
//
// Element type (KvPoolOptions::dtype, the engine's --kv-dtype):
//   kF32 (default)  one slot is K [n_kv_heads, d_k], V [n_kv_heads, d_v] in fp32 (slot-major):
//                   what the bit-exact golden tests run on.
//   kBF16           K/V rounded to bf16 (RNE) when written, half the bytes; head-major within a
//                   page (K [n_kv_heads][slots][d_k], V [n_kv_heads][slots/2][d_v][2], the
//                   layout of kernels/ops.h KvPages) so attention reads each head in place. A
//                   ring is one page of its capacity, rounded up to a multiple of 16 slots.
// Each slot also holds the absolute position it holds (kEmptySlot when empty). Attention reads a
// sequence's slots through view(), in position order for full layers (kernels/ops.h KvPages).
// Pages and rings start zeroed (finite) and only ever hold written rows, as bf16 pages require.
//
// Invariants: positions of one sequence are appended contiguously; ensure(seq, end) must succeed
// before positions < end are written; truncate(seq, n) forgets positions ≥ n in every layer,
// restoring exactly the state of the accepted prefix (rings included, as long as n ≥ length −
// slack). Every page is either free or in exactly one block table: blocks_used() returns to 0
// once every sequence is cleared.
#pragma once

#include <cstdint>
#include <vector>

#include "core/huge_buffer.h"
#include "kernels/ops.h"

namespace dfl {

struct KvLayerSpec {
  int32_t n_kv_heads = 0;
  int32_t d_k = 0;
  int32_t d_v = 0;
  int32_t window = 0;  // keys a sliding layer can see (0 = full layer: paged, keeps everything)
};

// The layer-state rule (the one place it is written): a sliding layer whose resolved window is
// (left, right) keeps a ring of left + 1 keys — W with the HF/vLLM edge, W + 1 with SGLang's,
// whatever the causality (a symmetric drafter window has the same left); others keep everything.
KvLayerSpec kv_layer_spec(bool sliding, Window window, int32_t n_kv_heads, int32_t d_k, int32_t d_v);

// Bytes of K/V one sequence needs at `context` positions for this layout (unpaged, elements of
// `dtype`): full layers grow with the context, sliding layers hold min(context, window + slack)
// slots (bf16 rings: that capacity rounded up to 16).
int64_t kv_bytes_per_sequence(const std::vector<KvLayerSpec>& layers, int64_t context, int32_t slack,
                              KvDtype dtype = KvDtype::kF32);

struct KvPoolOptions {
  int32_t max_seqs = 1;        // sequence slots 0..max_seqs-1
  int32_t max_context = 4096;  // positions one sequence may hold
  int32_t slack = 16;          // most positions appended (or rolled back) at once on rings
  int32_t block_slots = 16;    // slots per page of the full layers (a multiple of 16)
  int64_t n_blocks = 0;        // pages; 0 = enough for every slot at max_context
  KvDtype dtype = KvDtype::kF32;  // element type and layout (see the top of the file)
};

// Scratch a view is built in (page pointers of one (sequence, layer)); reused across calls.
struct KvViewScratch {
  std::vector<const float*> k, v;
  std::vector<const uint16_t*> k16, v16;
  std::vector<const int32_t*> pos;
};

class KvPool {
 public:
  KvPool() = default;
  KvPool(std::vector<KvLayerSpec> layers, const KvPoolOptions& opts);

  int32_t n_layers() const { return static_cast<int32_t>(layers_.size()); }
  int32_t max_seqs() const { return static_cast<int32_t>(seqs_.size()); }
  int32_t max_context() const { return opts_.max_context; }
  int32_t slack() const { return opts_.slack; }
  int32_t block_slots() const { return opts_.block_slots; }
  KvDtype dtype() const { return opts_.dtype; }
  const KvLayerSpec& layer(int32_t il) const { return layers_[il]; }
  bool has_full_layers() const { return n_full_ > 0; }
  bool has_rings() const { return n_full_ < n_layers(); }

  // Positions held by `seq` (0..length-1).
  int32_t length(int32_t seq) const { return seqs_[seq].length; }
  // Pages positions [0, end) of `seq` need beyond those it holds.
  int64_t blocks_needed(int32_t seq, int32_t end) const;
  // Makes room for positions [0, end). False (and nothing changes) when the pool is out of pages.
  bool ensure(int32_t seq, int32_t end);
  // Writes K/V rows for positions [pos0, pos0 + n) of layer il (room ensured; n ≤ slack on rings).
  //   k: [n, n_kv, d_k]   v: [n, n_kv, d_v]
  void write(int32_t seq, int32_t il, int32_t pos0, int32_t n, const float* k, const float* v);
  // Marks positions up to `end` as held (once per forward, after every layer is written).
  void commit_length(int32_t seq, int32_t end);
  // Forgets positions ≥ n (n ≤ what was written); pages wholly past n return to the pool.
  // Rolling a ring back by more than `slack` is a programming error (asserted).
  void truncate(int32_t seq, int32_t n);
  // Forgets the sequence and frees all its pages.
  void clear(int32_t seq);

  // The slots attention of layer il reads for `seq` (full layers: up to the highest written
  // position; rings: all slots). Pointers stay valid until the next ensure/truncate/clear.
  KvPages view(int32_t seq, int32_t il, KvViewScratch& scratch) const;

  // Budget accounting.
  int64_t blocks_total() const { return n_blocks_; }
  int64_t blocks_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t blocks_used() const { return n_blocks_ - blocks_free(); }
  // K/V bytes (positions metadata not counted, as in kv_bytes_per_sequence):
  int64_t bytes_per_block() const;    // one page of every full layer
  int64_t ring_bytes_per_seq() const; // every ring of one sequence slot
  int64_t bytes_total() const;        // pages + rings, as allocated
  // Bytes one sequence needs at `context` positions (pages rounded up, plus its rings).
  int64_t bytes_per_sequence(int32_t context) const;

 private:
  struct Seq {
    int32_t length = 0;
    int32_t high_water = 0;        // one past the highest position written (≥ length)
    int32_t rollback_floor = 0;    // smallest length truncate may go back to (rings)
    std::vector<int32_t> blocks;   // block table (page ids) of the full layers
  };
  int32_t ring_cap(int32_t il) const { return ring_cap_[il]; }
  // Element offsets of a ring's K / V within its layer's storage (either dtype).
  size_t ring_k_off(int32_t seq, int32_t il) const;
  size_t ring_v_off(int32_t seq, int32_t il) const;
  void write_bf16_row(int32_t il, uint16_t* kpage, uint16_t* vpage, int32_t page_slots, int32_t row,
                      const float* k, const float* v);
  int64_t elem_bytes() const { return kv_dtype_bytes(opts_.dtype); }
  int32_t* ring_pos(int32_t seq, int32_t il) const;

  std::vector<KvLayerSpec> layers_;
  KvPoolOptions opts_;
  int32_t n_full_ = 0;
  int64_t n_blocks_ = 0;
  std::vector<int32_t> ring_cap_;            // per layer (0 for full layers)
  std::vector<HugeArray<float>> k_, v_;      // kF32, per layer: pages [n_blocks][bs][..] or rings [max_seqs][cap][..]
  std::vector<HugeArray<uint16_t>> k16_, v16_;  // kBF16, the same pages / rings (head-major inside)
  std::vector<HugeArray<int32_t>> ring_pos_; // per sliding layer: [max_seqs][cap]
  HugeArray<int32_t> page_pos_;              // [n_blocks][bs], shared by the full layers
  std::vector<int32_t> free_;                // free page ids (a stack)
  std::vector<Seq> seqs_;
};

}  // namespace dfl
