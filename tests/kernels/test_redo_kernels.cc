// The kernels that run as redoable pool jobs (ThreadPool::parallel_for_redoable), revoked
// inside their chunks: a pool set to revoke every worker still inside a chunk once the caller has
// run out of chunks (set_revoke_when_quiet(true, at_once)) runs each kernel, on every ISA path,
// several times; every run must give the bits of a one-thread pool. A kernel whose chunks are
// not plain stores (a `+=` over a partial run, a per-thread buffer trusted across chunks) fails
// here: an in-place `y += x` job opted in by mistake failed within ~100 runs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/threadpool.h"
#include "kernels/ops.h"
#include "kernel_test_util.h"

// A redoable chunk may be stopped at any instruction for good, so it must not allocate outside a
// NoAbandon scope: a worker stopped inside malloc leaves its arena locked, and the next
// allocation on that arena waits forever. Every allocation of this test binary is checked.
namespace {
[[noreturn]] void allocation_in_chunk() {
  static const char msg[] = "operator new inside an abandonable redoable chunk\n";
  (void)!write(2, msg, sizeof(msg) - 1);
  std::abort();
}
void* checked_alloc(std::size_t n) {
  if (dfl::ThreadPool::in_abandonable_chunk()) allocation_in_chunk();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* checked_alloc_aligned(std::size_t n, std::align_val_t al) {
  if (dfl::ThreadPool::in_abandonable_chunk()) allocation_in_chunk();
  const std::size_t a = static_cast<std::size_t>(al);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return checked_alloc(n); }
void* operator new[](std::size_t n) { return checked_alloc(n); }
void* operator new(std::size_t n, std::align_val_t al) { return checked_alloc_aligned(n, al); }
void* operator new[](std::size_t n, std::align_val_t al) { return checked_alloc_aligned(n, al); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace dfl {
namespace {

// More threads than a small machine has cores (workers preempted inside chunks too), few enough
// that every job stays a redoable one (at most 64 chunks: 4 per thread above 4 threads).
int revoking_threads() { return std::min(8, std::max(3, hardware_threads() + 1)); }

// Runs `kernel(pool, out)` once on a one-thread pool, then `reps` times on the revoking pool;
// every run must leave out's bytes as the first did.
void expect_same_bits_when_revoked(const std::string& what, size_t n_out, int reps,
                                   const std::function<void(ThreadPool&, float*)>& kernel, ThreadPool& revoking) {
  ThreadPool solo(1);
  std::vector<float> want(n_out, -1.0f), got(n_out);
  kernel(solo, want.data());
  for (int r = 0; r < reps; ++r) {
    std::fill(got.begin(), got.end(), -2.0f);
    kernel(revoking, got.data());
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), n_out * sizeof(float))) << what << ", run " << r;
  }
}

using test::ActScope;

TEST(RedoableKernels, SameBitsWhenWorkersAreRevokedInsideChunks) {
  ThreadPool pool(revoking_threads());
  pool.set_revoke_when_quiet(true, /*at_once=*/true);
  const uint64_t revoked_before = pool.revocations();
  const int64_t K = 1024, N = 1024;
  const auto x = test::randn(size_t(16 * K), 21);
  for (const test::PathConfig& path : test::ggml_paths()) {
    test::PathScope scope(path);
    // GGUF block weights: as stored (the row kernels) and prepacked (the tile kernels, the many-
    // weights job), with both int8 activation modes (int8x2 adds each residual row as it stores).
    for (GgmlActivations act : {GgmlActivations::kInt8, GgmlActivations::kInt8x2}) {
      ActScope a(act);
      for (DType t : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ5_K}) {
        const auto wb = test::random_blocks(t, N, K, 5 + static_cast<uint32_t>(t));
        const WeightMatrix w = ggml_weight(t, N, K, wb.data());
        const PackedWeight pw = prepack_weight(w, &pool);
        for (int64_t M : {1, 16}) {
          const std::string tag = path.name + " " + dtype_name(t) + (act == GgmlActivations::kInt8 ? " int8" : " int8x2") +
                                  " M=" + std::to_string(M);
          expect_same_bits_when_revoked(tag + " blocks", size_t(M * N), 6,
                                        [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, w, y, p); }, pool);
          if (t == DType::kQ8_0 && act == GgmlActivations::kInt8x2) {  // greedy picks: the head plane
            const ops::ArgmaxScreen screen = ops::argmax_screen(w, &pool);
            expect_same_bits_when_revoked(tag + " greedy picks", size_t(M), 6,
                                          [&](ThreadPool& p, float* y) {
                                            ops::matmul_argmax(x.data(), M, w, screen, reinterpret_cast<int32_t*>(y), p);
                                          },
                                          pool);
          }
          if (!pw.repacked()) continue;
          expect_same_bits_when_revoked(tag + " prepacked", size_t(M * N), 6,
                                        [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, pw.matrix(), y, p); },
                                        pool);
          expect_same_bits_when_revoked(tag + " prepacked, two weights of one input", size_t(2 * M * N), 6,
                                        [&](ThreadPool& p, float* y) {
                                          const ops::MatmulOut outs[2] = {{&pw.matrix(), y}, {&pw.matrix(), y + M * N}};
                                          ops::matmul_same_input(x.data(), M, outs, 2, p);
                                        },
                                        pool);
        }
      }
    }
    // BF16 and F16 (prepacked where this machine has a faster layout) and the load-time q8 format.
    const test::Bf16Weight bw = test::bf16_weight(N, K, 22, 0.05f);
    const WeightMatrix& wb16 = bw.w;
    const PackedWeight pb = prepack_weight(wb16, &pool);
    const QuantizedQ8 q8 = quantize_q8(wb16, &pool);
    std::vector<uint16_t> f16_bits(bw.bits.size());  // the same values as F16 (prepacked likewise)
    for (size_t i = 0; i < f16_bits.size(); ++i) f16_bits[i] = f32_to_f16(bf16_to_f32(bw.bits[i]));
    WeightMatrix wf16 = wb16;
    wf16.dtype = DType::kF16;
    wf16.data = f16_bits.data();
    const PackedWeight pf = prepack_weight(wf16, &pool);
    for (int64_t M : {1, 16}) {
      const std::string tag = path.name + " M=" + std::to_string(M);
      expect_same_bits_when_revoked(tag + " bf16", size_t(M * N), 6,
                                    [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, pb.matrix(), y, p); }, pool);
      expect_same_bits_when_revoked(tag + " f16", size_t(M * N), 6,
                                    [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, pf.matrix(), y, p); }, pool);
      expect_same_bits_when_revoked(tag + " q8", size_t(M * N), 6,
                                    [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, q8.matrix(), y, p); }, pool);
    }
    // Attention (decode, a verify block and a prefill-length run over a 600-slot cache; GQA) and
    // the element-wise ops whose output aliases no input.
    AttnParams ap;
    ap.n_heads = 8;
    ap.n_kv_heads = 2;
    ap.d_qk = ap.d_v = 64;
    ap.scale = 0.125f;
    const int64_t n_kv = 600;
    const int64_t max_q = kPrefillAttentionMinQueries;
    const auto q = test::randn(size_t(max_q * 8 * 64), 23), k = test::randn(size_t(n_kv * 2 * 64), 24),
               v = test::randn(size_t(n_kv * 2 * 64), 25);
    std::vector<int32_t> k_pos(static_cast<size_t>(n_kv)), q_pos(static_cast<size_t>(max_q));
    for (int64_t j = 0; j < n_kv; ++j) k_pos[size_t(j)] = int32_t(j);
    for (int64_t i = 0; i < max_q; ++i) q_pos[size_t(i)] = int32_t(n_kv - max_q + i);
    for (int64_t n_q : {int64_t(1), int64_t(16), max_q}) {
      expect_same_bits_when_revoked(path.name + " attention n_q=" + std::to_string(n_q), size_t(n_q * 8 * 64), 6,
                                    [&](ThreadPool& p, float* o) {
                                      ops::attention(q.data() + (max_q - n_q) * 8 * 64, q_pos.data() + (max_q - n_q),
                                                     n_q, k.data(), v.data(), k_pos.data(), n_kv, ap, o, p);
                                    },
                                    pool);
    }
    const int64_t rows = 64, dim = 1024;
    const auto g = test::randn(size_t(rows * dim), 26), u = test::randn(size_t(rows * dim), 27),
               nw = test::randn(size_t(dim), 28);
    expect_same_bits_when_revoked(path.name + " rms_norm", size_t(rows * dim), 6,
                                  [&](ThreadPool& p, float* y) { ops::rms_norm(g.data(), nw.data(), rows, dim, 1e-6f, y, &p); },
                                  pool);
    expect_same_bits_when_revoked(path.name + " silu_mul", size_t(rows * dim), 6,
                                  [&](ThreadPool& p, float* y) { ops::silu_mul(g.data(), u.data(), rows * dim, y, &p); }, pool);
    expect_same_bits_when_revoked(path.name + " gelu_tanh_mul", size_t(rows * dim), 6,
                                  [&](ThreadPool& p, float* y) { ops::gelu_tanh_mul(g.data(), u.data(), rows * dim, y, &p); },
                                  pool);
  }
  const uint64_t revoked = pool.revocations() - revoked_before;
  std::printf("workers revoked inside or between chunks: %llu (pool of %d threads, %d hardware threads)\n",
              static_cast<unsigned long long>(revoked), pool.n_threads(), hardware_threads());
  // Over this many jobs workers are often still inside a chunk when the caller runs out
  // (1,170–1,222 revocations a run on a 2-core machine); a run with none would have tested nothing.
  if (ThreadPool::redo_supported()) {
    EXPECT_GT(revoked, 0u);
  }
}

}  // namespace
}  // namespace dfl
