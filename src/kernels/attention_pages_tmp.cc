// TEMPORARY: paged attention by gathering the pages into one contiguous run, then the contiguous
// kernel (same logical slots → same bits). Replaced by native paged kernels.
#include <cstring>
#include <vector>

#include "kernels/ops.h"

namespace dfl::ops {

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool) {
  const int64_t n = kv.n_slots;
  if (n <= kv.page_slots || kv.page_slots == 0) {
    attention(q, q_pos, n_q, kv.k[0], kv.v[0], kv.pos[0], n, p, out, pool);
    return;
  }
  thread_local std::vector<float> k, v;
  thread_local std::vector<int32_t> pos;
  const int64_t kr = int64_t(p.n_kv_heads) * p.d_qk, vr = int64_t(p.n_kv_heads) * p.d_v;
  k.resize(size_t(n * kr));
  v.resize(size_t(n * vr));
  pos.resize(size_t(n));
  for (int64_t j0 = 0; j0 < n; j0 += kv.page_slots) {
    const int64_t pg = j0 / kv.page_slots, m = std::min<int64_t>(kv.page_slots, n - j0);
    std::memcpy(k.data() + j0 * kr, kv.k[pg], sizeof(float) * m * kr);
    std::memcpy(v.data() + j0 * vr, kv.v[pg], sizeof(float) * m * vr);
    std::memcpy(pos.data() + j0, kv.pos[pg], sizeof(int32_t) * m);
  }
  attention(q, q_pos, n_q, k.data(), v.data(), pos.data(), n, p, out, pool);
}

}  // namespace dfl::ops
