// The recurrent layer-state kind (Gated DeltaNet), beside the attention KV pool (kv_pool.h):
// per sequence slot and per linear-attention layer, fp32
//   conv state  [conv_dim, K-1]        the last K-1 pre-conv inputs of each channel (oldest first)
//   ssm state   [n_v_heads, d_k, d_v]  the gated delta-rule state S
// held TWICE per slot (buffers 0/1, `cur` names the committed one), plus the replay inputs of
// the slot's last forward: [max_block, row_width] rows per layer (row = pre-conv qkv | a | b,
// what the recurrence consumes; the model layer writes and reads them).
//
// Rollback protocol (exact, no per-position snapshots): a forward of n tokens at pos0 reads
// buffer cur and writes buffer 1-cur (begin_forward / end_forward flip cur: the pre-forward state
// stays intact in the other buffer). Rolling back to length m, pos0 < m < pos0 + n, means
// re-running the recurrence over the first m - pos0 saved rows from the pre-forward buffer, in
// place, and making it current again (the model does the math: model/gdn.h gdn_replay); m ==
// pos0 only flips back; m == pos0 + n is a no-op. Replay runs the same per-token code as the
// forward, so the states equal those of decoding the m tokens one at a time, bit for bit.
// A forward longer than max_block keeps no rows: it can be rolled back whole but not in part.
//
// Memory per slot: 2 × Σ_layers (conv_dim·(K-1) + Hv·dk·dv) + max_block·row_width per layer, ×4 B.
#pragma once

#include <cstdint>
#include <vector>

#include "core/huge_buffer.h"

namespace dfl {

struct RecurrentSpec {
  int32_t n_layers = 0;   // linear-attention layers
  int32_t conv_dim = 0;   // channels of the depthwise conv (2·Hk·dk + Hv·dv)
  int32_t conv_keep = 0;  // K - 1
  int32_t n_v_heads = 0;
  int32_t d_k = 0, d_v = 0;
  int32_t row_width = 0;  // floats of one replay row
  int64_t conv_floats() const { return int64_t(conv_dim) * conv_keep; }
  int64_t ssm_floats() const { return int64_t(n_v_heads) * d_k * d_v; }
};

// Bytes of one slot: both state buffers and the replay rows (max_block of them per layer).
int64_t recurrent_bytes_per_sequence(const RecurrentSpec& s, int32_t max_block);
// Bytes of one committed state (conv + ssm of every layer), what a snapshot would copy.
int64_t recurrent_state_bytes(const RecurrentSpec& s);

class RecurrentState {
 public:
  RecurrentState() = default;
  RecurrentState(const RecurrentSpec& spec, int32_t max_seqs, int32_t max_block);

  const RecurrentSpec& spec() const { return spec_; }
  int32_t max_seqs() const { return int32_t(seqs_.size()); }
  int32_t max_block() const { return max_block_; }
  int32_t length(int32_t seq) const { return seqs_[seq].length; }
  int64_t bytes_total() const;

  // Starts a forward of n tokens at pos0 == length(seq) (pos0 == 0 resets the slot first).
  void begin_forward(int32_t seq, int32_t pos0, int32_t n);
  // Commits it: the written buffer becomes current, length = pos0 + n.
  void end_forward(int32_t seq);

  // Buffers of layer l (a linear-layer index): `in` = committed (cur), `out` = the other one.
  const float* conv_in(int32_t seq, int32_t l) const { return buf(seq, l, cur(seq)); }
  float* conv_out(int32_t seq, int32_t l) { return buf(seq, l, 1 - cur(seq)); }
  const float* ssm_in(int32_t seq, int32_t l) const { return buf(seq, l, cur(seq)) + spec_.conv_floats(); }
  float* ssm_out(int32_t seq, int32_t l) { return buf(seq, l, 1 - cur(seq)) + spec_.conv_floats(); }
  // The committed conv / ssm state (for tests and inspection).
  const float* conv(int32_t seq, int32_t l) const { return conv_in(seq, l); }
  const float* ssm(int32_t seq, int32_t l) const { return ssm_in(seq, l); }
  // Replay rows of layer l [max_block, row_width]; valid when the last forward kept them.
  float* rows(int32_t seq, int32_t l);
  bool keeps_rows(int32_t seq) const { return seqs_[seq].last_n <= max_block_; }

  // Rollback bookkeeping (the math is the model's). Returns -1 when m == length (nothing to
  // do), else the number k ≥ 0 of saved rows the model must replay from the pre-forward buffer
  // (pre_conv / pre_ssm, in place); then call finish_rollback. After a rollback the slot can
  // only go forward (or stay): the pre-forward state was consumed.
  //   m must lie in [last pos0, length]; a partial rollback of a forward that kept no rows is
  //   a programming error (dfl::Error).
  int32_t start_rollback(int32_t seq, int32_t m);
  // Throws dfl::Error when start_rollback(seq, m) would (changes nothing).
  void check_rollback(int32_t seq, int32_t m);
  float* pre_conv(int32_t seq, int32_t l) { return buf(seq, l, 1 - cur(seq)); }
  float* pre_ssm(int32_t seq, int32_t l) { return buf(seq, l, 1 - cur(seq)) + spec_.conv_floats(); }
  void finish_rollback(int32_t seq, int32_t m);
  // Forgets the sequence (state zeroed on its next forward from 0).
  void clear(int32_t seq);

 private:
  struct Seq {
    int32_t length = 0;
    int32_t cur = 0;
    int32_t last_pos0 = 0, last_n = 0;  // the last forward (rollback window)
    bool in_forward = false;
  };
  static void drop_unfinished(Seq& s);
  int32_t cur(int32_t seq) const { return seqs_[seq].cur; }
  float* buf(int32_t seq, int32_t l, int32_t which) const;
  void zero(int32_t seq, int32_t which);

  RecurrentSpec spec_;
  int32_t max_block_ = 0;
  int64_t layer_floats_ = 0;  // conv + ssm of one layer
  HugeArray<float> state_;    // [max_seqs][2][n_layers][layer_floats_]
  HugeArray<float> rows_;     // [max_seqs][n_layers][max_block][row_width]
  std::vector<Seq> seqs_;
};

}  // namespace dfl
