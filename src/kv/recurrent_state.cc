#include "kv/recurrent_state.h"

#include <algorithm>

#include "core/error.h"

namespace dfl {

int64_t recurrent_state_bytes(const RecurrentSpec& s) {
  return int64_t(s.n_layers) * (s.conv_floats() + s.ssm_floats()) * int64_t(sizeof(float));
}

int64_t recurrent_bytes_per_sequence(const RecurrentSpec& s, int32_t max_block) {
  return 2 * recurrent_state_bytes(s) +
         int64_t(s.n_layers) * max_block * s.row_width * int64_t(sizeof(float));
}

RecurrentState::RecurrentState(const RecurrentSpec& spec, int32_t max_seqs, int32_t max_block)
    : spec_(spec), max_block_(max_block), layer_floats_(spec.conv_floats() + spec.ssm_floats()) {
  DFL_CHECK(max_seqs > 0 && max_block > 0, "recurrent state: bad sizes");
  state_.reset(size_t(max_seqs) * 2 * spec.n_layers * layer_floats_);
  rows_.reset(size_t(max_seqs) * spec.n_layers * max_block * spec.row_width);
  seqs_.resize(max_seqs);
}

int64_t RecurrentState::bytes_total() const {
  return int64_t(state_.size() + rows_.size()) * int64_t(sizeof(float));
}

float* RecurrentState::buf(int32_t seq, int32_t l, int32_t which) const {
  const size_t off = ((size_t(seq) * 2 + which) * spec_.n_layers + l) * layer_floats_;
  return const_cast<float*>(state_.data()) + off;
}

float* RecurrentState::rows(int32_t seq, int32_t l) {
  return rows_.data() + (size_t(seq) * spec_.n_layers + l) * max_block_ * spec_.row_width;
}

void RecurrentState::zero(int32_t seq, int32_t which) {
  std::fill_n(buf(seq, 0, which), size_t(spec_.n_layers) * layer_floats_, 0.0f);
}

// A forward that threw (e.g. a token id out of range) never committed: the current buffer still
// holds the state at `length`, but the rollback window of the previous forward is gone.
void RecurrentState::drop_unfinished(Seq& s) {
  if (!s.in_forward) return;
  s.in_forward = false;
  s.last_pos0 = s.length;
  s.last_n = 0;
}

void RecurrentState::begin_forward(int32_t seq, int32_t pos0, int32_t n) {
  Seq& s = seqs_[seq];
  drop_unfinished(s);
  if (pos0 == 0) {
    s.length = 0;
    zero(seq, s.cur);
  }
  DFL_CHECK(pos0 == s.length, "recurrent state of slot ", seq, " holds ", s.length,
            " positions, the forward starts at ", pos0);
  s.last_pos0 = pos0;
  s.last_n = n;
  s.in_forward = true;
}

void RecurrentState::end_forward(int32_t seq) {
  Seq& s = seqs_[seq];
  DFL_ASSERT(s.in_forward);
  s.in_forward = false;
  s.cur = 1 - s.cur;
  s.length = s.last_pos0 + s.last_n;
}

void RecurrentState::check_rollback(int32_t seq, int32_t m) {
  Seq& s = seqs_[seq];
  drop_unfinished(s);
  if (m == s.length) return;
  DFL_CHECK(m >= s.last_pos0 && m <= s.length, "recurrent state of slot ", seq,
            ": cannot roll back to ", m, " (the last forward covered [", s.last_pos0, ", ",
            s.length, "))");
  const int32_t k = m - s.last_pos0;
  DFL_CHECK(k == 0 || s.last_n <= max_block_, "recurrent state of slot ", seq,
            ": a forward of ", s.last_n, " tokens (> max_block ", max_block_,
            ") can only be rolled back whole");
}

int32_t RecurrentState::start_rollback(int32_t seq, int32_t m) {
  check_rollback(seq, m);
  const Seq& s = seqs_[seq];
  return m == s.length ? -1 : m - s.last_pos0;
}

void RecurrentState::finish_rollback(int32_t seq, int32_t m) {
  Seq& s = seqs_[seq];
  s.cur = 1 - s.cur;  // the pre-forward buffer (replayed in place) is current again
  s.length = m;
  s.last_pos0 = m;  // the pre-forward state is gone: nothing before m can be reached again
  s.last_n = 0;
}

void RecurrentState::clear(int32_t seq) {
  Seq& s = seqs_[seq];
  s = Seq{};
  zero(seq, 0);
  zero(seq, 1);
}

}  // namespace dfl
