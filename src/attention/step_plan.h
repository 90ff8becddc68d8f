// The per-step plan of one batched forward: built ONCE per forward and read by every layer
// (flashinfer's plan/run split, vLLM's attention metadata). Nothing downstream re-derives a
// position or recomputes a RoPE table.
//
// A batch is a list of segments, each a run of consecutive positions of one sequence:
//   rows [row0, row0 + n) of the activations  ↔  positions [pos0, pos0 + n) of sequence `seq`.
// The plan holds row → position for every row and, for each distinct RoPE table the model uses
// (a model dedups its tables at load), cos/sin of every row: [n_rows, n_rot/2] each.
// Per-segment KV views are built from the pool at attention time (KvPool::view, O(pages)).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/rope.h"

namespace dfl {

struct PlanSegment {
  int32_t seq = 0;
  int32_t row0 = 0;
  int32_t n = 0;
  int32_t pos0 = 0;
};

class StepPlan {
 public:
  // Lays out `segs` (their row0 is assigned here, in order) and fills positions and the RoPE
  // tables of `ropes` for every row. Reuses its buffers (no allocation once warm).
  void build(const PlanSegment* segs, int32_t n_segs, const std::vector<RopeTable>& ropes);

  int32_t n_rows() const { return n_rows_; }
  const std::vector<PlanSegment>& segments() const { return segs_; }
  const int32_t* positions() const { return pos_.data(); }   // [n_rows]
  const float* cos(int32_t rope) const { return cos_[rope].data(); }  // [n_rows, n_rot/2]
  const float* sin(int32_t rope) const { return sin_[rope].data(); }

 private:
  int32_t n_rows_ = 0;
  std::vector<PlanSegment> segs_;
  std::vector<int32_t> pos_;
  std::vector<std::vector<float>> cos_, sin_;
};

// Index of `spec` (with `theta_override`, see RopeTable) in `tables`, appended when new: the
// dedup a model does at load so each distinct table is filled once per step.
int32_t intern_rope(std::vector<RopeTable>& tables, std::vector<std::pair<RopeSpec, float>>& keys,
                    const RopeSpec& spec, float theta_override = 0.0f);

}  // namespace dfl
