#include "model/fp8_weights.h"

#include <cstring>
#include <numeric>

#include "core/error.h"

namespace dfl {

namespace {
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

Fp8Grid resolve_fp8_grid(const std::string& name, int64_t n_out, int64_t n_in, int64_t scale_rows,
                         int64_t scale_cols, int64_t row_shards, int64_t bo, int64_t bi) {
  DFL_CHECK(bo > 0 && bi > 0 && row_shards > 0, "fp8 grid: bad block size / shard count");
  Fp8Grid g;
  g.block_out = bo;
  g.block_in = bi;
  const int64_t cols = cdiv(n_in, bi);
  const int64_t uniform = cdiv(n_out, bo);
  const bool can_shard = row_shards > 1 && n_out % row_shards == 0;
  const int64_t shard_rows = can_shard ? n_out / row_shards : n_out;
  const int64_t per_shard = can_shard ? row_shards * cdiv(shard_rows, bo) : -1;
  if (scale_cols == cols) {
    if (can_shard && shard_rows % bo != 0 && scale_rows == per_shard) {
      g.row_shards = row_shards;
      return g;
    }
    if (scale_rows == uniform) return g;
  }
  throw Error(str("tensor '", name, "': FP8 scale grid [", scale_rows, ", ", scale_cols,
                  "] does not fit weight [", n_out, ", ", n_in, "] with ", bo, "x", bi,
                  " blocks (expected [", uniform, ", ", cols, "]",
                  can_shard && per_shard != uniform
                      ? str(" or the per-shard grid [", per_shard, ", ", cols, "] of ", row_shards,
                            " shards")
                      : std::string(),
                  ")"));
}

std::vector<float> regrid_per_shard_scales(const float* scales, const Fp8Grid& g, int64_t n_out,
                                           int64_t n_in, int64_t* block_out_out) {
  const int64_t T = g.row_shards;
  const int64_t R = n_out / T;
  const int64_t b = std::gcd(g.block_out, R);
  const int64_t cols = cdiv(n_in, g.block_in);
  const int64_t per = cdiv(R, g.block_out);  // scale rows per shard
  std::vector<float> out(size_t(n_out / b) * cols);
  for (int64_t r = 0; r < n_out / b; ++r) {
    const int64_t row = r * b;                   // first weight row of this b-block
    const int64_t shard = row / R, local = row % R;
    const int64_t src = shard * per + local / g.block_out;
    std::memcpy(out.data() + r * cols, scales + src * cols, sizeof(float) * cols);
  }
  *block_out_out = b;
  return out;
}

WeightMatrix load_linear_fp8(const Checkpoint& ck, const std::string& name, int64_t n_out,
                             int64_t n_in, int64_t row_shards, Fp8ScaleStore& store, int64_t bo,
                             int64_t bi) {
  const TensorInfo& t = ck.require(
      name, DTypeSet{DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}, {n_out, n_in});
  WeightMatrix w;
  w.dtype = t.dtype;
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = t.data;
  if (t.dtype != DType::kF8E4M3) return w;
  const std::string base =
      name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
  const std::string sname = base + ".weight_scale_inv";
  const TensorInfo* s = ck.find(sname);
  DFL_CHECK(s, "tensor '", name, "' is F8_E4M3 but '", sname, "' is missing");
  DFL_CHECK(s->dtype == DType::kF32 && s->shape.size() == 2, "tensor '", sname,
            "' must be a 2-D F32 scale grid");
  const Fp8Grid g = resolve_fp8_grid(name, n_out, n_in, s->shape[0], s->shape[1], row_shards, bo, bi);
  const float* scales = reinterpret_cast<const float*>(s->data);
  w.scale_block_in = bi;
  if (g.row_shards == 1) {
    w.scale = scales;
    w.scale_block_out = bo;
  } else {
    int64_t b = 0;
    store.tables.push_back(regrid_per_shard_scales(scales, g, n_out, n_in, &b));
    w.scale = store.tables.back().data();
    w.scale_block_out = b;
  }
  return w;
}

}  // namespace dfl
