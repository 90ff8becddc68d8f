// FP8 block-scale weights: the scale-grid rules (uniform and per-TP-shard ceil grids) on the real
// MiMo shapes of TARGETS-SPEC §3.3 (header-only synthetic files: sparse FP8 payloads, real scale
// tables), and the matmul over FP8 + re-gridded scales against a scalar reference that
// dequantizes first with the per-shard rule written out independently.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <random>

#include "common/golden.h"
#include "common/models.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/fp8_weights.h"

namespace dfl {
namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Writes a safetensors file whose small tensors (scales) carry data and whose FP8 weights are a
// sparse hole (zeros, no disk blocks), so real-size shapes cost nothing.
struct BigTensor {
  std::string name;
  std::vector<int64_t> shape;
};
void write_sparse_st(const std::string& path, const std::map<std::string, test::StTensor>& small,
                     const std::vector<BigTensor>& big) {
  nlohmann::json h = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : small) {
    h[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  uint64_t off = data.size();
  for (const auto& b : big) {
    uint64_t bytes = 1;
    for (int64_t d : b.shape) bytes *= uint64_t(d);
    h[b.name] = {{"dtype", "F8_E4M3"}, {"shape", b.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string header = h.dump();
  while (header.size() % 8) header += ' ';
  std::string prefix;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) prefix += static_cast<char>((n >> (8 * i)) & 0xff);
  test::write_text(path, prefix + header + data);
  ASSERT_EQ(::truncate(path.c_str(), off_t(8 + header.size() + off)), 0);
}

test::StTensor scale_table(int64_t rows, int64_t cols, float base) {
  std::vector<float> v(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v[size_t(r * cols + c)] = base + float(r) + 0.001f * float(c);
  return {"F32", {rows, cols}, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)};
}

// The scale multiplying weight element (row, col) under the per-shard rule, written directly.
float shard_scale(const float* s, int64_t n_in, int64_t shards, int64_t n_out, int64_t row, int64_t col) {
  const int64_t R = n_out / shards, per = cdiv(R, 128), cols = cdiv(n_in, 128);
  return s[((row / R) * per + (row % R) / 128) * cols + col / 128];
}

struct RealCase {
  const char* name;
  int64_t rows, cols, scale_rows;
  bool per_shard;
};
// MiMo-V2-Flash / V2.5 shapes, ckpt_tp = 4 (num_key_value_heads of the full layers).
const RealCase kReal[] = {
    {"full.q_proj", 64 * 192, 4096, 96, false},
    {"full.k_proj", 4 * 192, 4096, 8, true},      // [768, 4096] → [8, 32], not [6, 32]
    {"full.v_proj", 4 * 128, 4096, 4, false},
    {"swa.k_proj", 8 * 192, 4096, 12, false},
    {"swa.v_proj", 8 * 128, 4096, 8, false},
    {"full.o_proj", 4096, 64 * 128, 32, false},
    {"v25.full.qkv_proj", 4 * 3392, 4096, 108, true},   // 13568 rows: 4 × 27, not 106
    {"v25.swa.qkv_proj", 4 * 3712, 4096, 116, false},   // 14848 rows: 4 × 29 = 116 either way
    {"dense.down_proj", 4096, 16384, 32, false},
    {"expert.down_proj", 4096, 2048, 32, false},
};

TEST(MiMoFp8, ScaleGridsOnRealShapesFromHeaderOnlyFiles) {
  test::TempDir dir("mimo_fp8_real");
  std::map<std::string, test::StTensor> small;
  std::vector<BigTensor> big;
  for (const RealCase& c : kReal) {
    small[std::string(c.name) + ".weight_scale_inv"] = scale_table(c.scale_rows, cdiv(c.cols, 128), 1.0f);
    big.push_back({std::string(c.name) + ".weight", {c.rows, c.cols}});
  }
  write_sparse_st(dir.file("model.safetensors"), small, big);
  Checkpoint ck(dir.str());
  Fp8ScaleStore store;
  for (const RealCase& c : kReal) {
    const std::string name = std::string(c.name) + ".weight";
    const Fp8Grid g = resolve_fp8_grid(name, c.rows, c.cols, c.scale_rows, cdiv(c.cols, 128), 4);
    EXPECT_EQ(g.row_shards, c.per_shard ? 4 : 1) << name;
    const WeightMatrix w = load_linear_fp8(ck, name, c.rows, c.cols, 4, store);
    EXPECT_EQ(w.dtype, DType::kF8E4M3);
    const TensorInfo* s = ck.find(std::string(c.name) + ".weight_scale_inv");
    const float* raw = reinterpret_cast<const float*>(s->data);
    // Every row/column block maps to the scale the per-shard (or uniform) rule names.
    const int64_t grid_cols = cdiv(c.cols, w.scale_block_in);
    for (int64_t row = 0; row < c.rows; row += (row % 64 == 63 ? 1 : 63)) {
      for (int64_t col : {int64_t(0), int64_t(127), int64_t(128), c.cols - 1}) {
        const float got = w.scale[(row / w.scale_block_out) * grid_cols + col / w.scale_block_in];
        const float want = c.per_shard ? shard_scale(raw, c.cols, 4, c.rows, row, col)
                                       : raw[(row / 128) * cdiv(c.cols, 128) + col / 128];
        ASSERT_EQ(got, want) << name << " row " << row << " col " << col;
      }
    }
  }
  // The k_proj example of §3.3: rows 128..191 use the shard's 2nd block (scale row 1), row 192
  // starts shard 1 (scale row 2) — a uniform reading would have given row 192 scale row 1.
  const WeightMatrix k = load_linear_fp8(ck, "full.k_proj.weight", 768, 4096, 4, store);
  EXPECT_EQ(k.scale_block_out, 64);
  EXPECT_EQ(k.scale[(191 / 64) * 32], 2.0f);
  EXPECT_EQ(k.scale[(192 / 64) * 32], 3.0f);
  EXPECT_EQ(k.scale[(767 / 64) * 32], 8.0f);
}

TEST(MiMoFp8, WrongGridNamesTheTensor) {
  try {
    resolve_fp8_grid("model.layers.0.self_attn.k_proj.weight", 768, 4096, 7, 32, 4);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("k_proj"), std::string::npos) << m;
    EXPECT_NE(m.find("[6, 32]"), std::string::npos) << m;
    EXPECT_NE(m.find("[8, 32]"), std::string::npos) << m;
  }
  EXPECT_THROW(resolve_fp8_grid("w", 256, 300, 2, 2, 1), Error);  // needs 3 columns
}

// FP8 matmul (F8 data read in place, re-gridded scales) vs dequantize-first in double.
TEST(MiMoFp8, MatmulMatchesDequantizeFirstReference) {
  std::mt19937 rng(7);
  struct Shape {
    int64_t rows, cols, shards;
  };
  const Shape shapes[] = {{48, 64, 2}, {272, 300, 2}, {352, 200, 2}, {768, 260, 4}, {256, 129, 1}, {200, 64, 2}};
  auto pool = test::make_pool();
  for (const Shape& sh : shapes) {
    const int64_t R = sh.rows / sh.shards, per = cdiv(R, 128), cols = cdiv(sh.cols, 128);
    std::vector<uint8_t> data(size_t(sh.rows * sh.cols));
    for (auto& b : data) {
      do b = uint8_t(rng() & 0xff);
      while ((b & 0x7f) == 0x7f);  // no NaN encodings
    }
    std::vector<float> scales(size_t(sh.shards * per * cols));
    std::uniform_real_distribution<float> u(0.001f, 0.01f);
    for (auto& s : scales) s = u(rng);
    const Fp8Grid g = resolve_fp8_grid("w", sh.rows, sh.cols, sh.shards * per, cols, sh.shards);
    WeightMatrix w;
    w.dtype = DType::kF8E4M3;
    w.n_out = sh.rows;
    w.n_in = sh.cols;
    w.data = data.data();
    std::vector<float> regrid;
    if (g.row_shards > 1) {
      int64_t b = 0;
      regrid = regrid_per_shard_scales(scales.data(), g, sh.rows, sh.cols, &b);
      w.scale = regrid.data();
      w.scale_block_out = b;
    } else {
      w.scale = scales.data();
    }
    const int64_t M = 5;
    std::vector<float> x(size_t(M * sh.cols));
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
    std::vector<float> y(size_t(M * sh.rows));
    ops::matmul(x.data(), M, w, y.data(), *pool);
    double max_rel = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t r = 0; r < sh.rows; ++r) {
        double acc = 0, mag = 0;
        for (int64_t c = 0; c < sh.cols; ++c) {
          const double wv = double(f8e4m3_to_f32(data[size_t(r * sh.cols + c)])) *
                            shard_scale(scales.data(), sh.cols, sh.shards, sh.rows, r, c);
          acc += wv * x[size_t(m * sh.cols + c)];
          mag += std::fabs(wv * x[size_t(m * sh.cols + c)]);
        }
        max_rel = std::max(max_rel, std::fabs(acc - y[size_t(m * sh.rows + r)]) / (mag + 1e-30));
      }
    EXPECT_LT(max_rel, 1e-5) << sh.rows << "x" << sh.cols << " shards " << sh.shards;
  }
}

}  // namespace
}  // namespace dfl
