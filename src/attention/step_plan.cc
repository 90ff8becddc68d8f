#include "attention/step_plan.h"

namespace dfl {

void StepPlan::build(const PlanSegment* segs, int32_t n_segs, const std::vector<RopeTable>& ropes) {
  segs_.assign(segs, segs + n_segs);
  int32_t rows = 0;
  for (auto& s : segs_) {
    s.row0 = rows;
    rows += s.n;
  }
  n_rows_ = rows;
  pos_.resize(size_t(rows));
  for (const auto& s : segs_)
    for (int32_t i = 0; i < s.n; ++i) pos_[size_t(s.row0 + i)] = s.pos0 + i;
  cos_.resize(ropes.size());
  sin_.resize(ropes.size());
  for (size_t r = 0; r < ropes.size(); ++r) {
    const size_t half = size_t(ropes[r].n_rot() / 2);
    cos_[r].resize(size_t(rows) * half);
    sin_[r].resize(size_t(rows) * half);
    ropes[r].fill(pos_.data(), rows, cos_[r].data(), sin_[r].data());
  }
}

int32_t intern_rope(std::vector<RopeTable>& tables, std::vector<std::pair<RopeSpec, float>>& keys,
                    const RopeSpec& spec, float theta_override) {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i].first == spec && keys[i].second == theta_override) return int32_t(i);
  keys.emplace_back(spec, theta_override);
  tables.emplace_back(spec, theta_override);
  return int32_t(tables.size() - 1);
}

}  // namespace dfl
