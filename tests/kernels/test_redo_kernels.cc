// The kernels that run as redoable pool jobs (ThreadPool::parallel_for_redoable), revoked
// inside their chunks: a pool set to revoke every worker still inside a chunk once the caller has
// run out of chunks (set_revoke_when_quiet(true, at_once)) runs each kernel, on every ISA path,
// several times; every run must give the bits of a one-thread pool. A kernel whose chunks are
// not plain stores (a `+=` over a partial run, a per-thread buffer trusted across chunks) fails
// here: an in-place `y += x` job opted in by mistake failed within ~100 runs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
// NoAbandon scope: a worker stopped inside malloc leaves its arena (or glibc's arena free list)
// locked, and the next allocation waits forever. Every allocation of this test binary is
// checked, at the C library's entry points too: a thread_local object with a destructor,
// touched for the first time on a thread, registers that destructor with calloc (this once hung
// a matmul test, the worker revoked inside its first calloc). operator new goes through malloc.
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
}
namespace {
[[noreturn]] void allocation_in_chunk() {
  static const char msg[] = "allocation inside an abandonable redoable chunk\n";
  (void)!write(2, msg, sizeof(msg) - 1);
  std::abort();
}
inline void check_allocation() {
  if (dfl::ThreadPool::in_abandonable_chunk()) allocation_in_chunk();
}
}  // namespace

// (Not under a sanitizer: its runtime owns malloc, and revocation is off there anyway.)
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define DFL_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DFL_TEST_SANITIZED 1
#endif
#ifndef DFL_TEST_SANITIZED
extern "C" {
void* malloc(std::size_t n) {
  check_allocation();
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) {
  check_allocation();
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) {
  check_allocation();
  return __libc_realloc(p, n);
}
void* memalign(std::size_t align, std::size_t n) {
  check_allocation();
  return __libc_memalign(align, n);
}
void* aligned_alloc(std::size_t align, std::size_t n) {
  check_allocation();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) {
  check_allocation();
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"
#endif

namespace dfl {
namespace {

// More threads than a small machine has cores (workers preempted inside chunks too), few enough
// that every job stays a redoable one (at most 64 chunks: 4 per thread above 4 threads).
int revoking_threads() { return std::min(8, std::max(3, hardware_threads() + 1)); }

// Runs `kernel(pool, out)` once on a one-thread pool, then `reps` times on a fresh revoking pool
// (fresh threads: each thread_local a kernel's chunks touch is touched there for the first time,
// which calls calloc); every run must leave out's bytes as the first did. Adds the pool's
// revocations to `revoked`.
void expect_same_bits_when_revoked(const std::string& what, size_t n_out, int reps,
                                   const std::function<void(ThreadPool&, float*)>& kernel, uint64_t& revoked) {
  ThreadPool solo(1);
  std::vector<float> want(n_out, -1.0f), got(n_out);
  kernel(solo, want.data());
  ThreadPool revoking(revoking_threads());
  revoking.set_revoke_when_quiet(true, /*at_once=*/true);
  for (int r = 0; r < reps; ++r) {
    std::fill(got.begin(), got.end(), -2.0f);
    kernel(revoking, got.data());
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), n_out * sizeof(float))) << what << ", run " << r;
  }
  revoked += revoking.revocations();
}

using test::ActScope;

TEST(RedoableKernels, SameBitsWhenWorkersAreRevokedInsideChunks) {
  ThreadPool pool(revoking_threads());  // for the weights' preparation
  uint64_t revoked = 0;
  const int64_t K = 1024, N = 1024;
  const auto x = test::randn(size_t(16 * K), 21);
  for (const test::PathConfig& path : test::ggml_paths()) {
    test::PathScope scope(path);
    // GGUF block weights: as stored (the row kernels) and prepacked (the tile kernels, the many-
    // weights job), with every activation mode (int8x2 adds each residual row as it stores; fp32
    // dequantizes weight rows).
    for (GgmlActivations act : {GgmlActivations::kInt8, GgmlActivations::kInt8x2, GgmlActivations::kFp32}) {
      ActScope a(act);
      for (DType t : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ5_K}) {
        const auto wb = test::random_blocks(t, N, K, 5 + static_cast<uint32_t>(t));
        const WeightMatrix w = ggml_weight(t, N, K, wb.data());
        const PackedWeight pw = prepack_weight(w, &pool);
        for (int64_t M : {1, 16}) {
          const std::string tag = path.name + " " + dtype_name(t) + (act == GgmlActivations::kInt8 ? " int8" : act == GgmlActivations::kInt8x2 ? " int8x2" : " fp32") +
                                  " M=" + std::to_string(M);
          expect_same_bits_when_revoked(tag + " blocks", size_t(M * N), 6,
                                        [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, w, y, p); }, revoked);
          if (t == DType::kQ8_0 && act == GgmlActivations::kInt8x2) {  // greedy picks: the head plane
            const ops::ArgmaxScreen screen = ops::argmax_screen(w, &pool);
            expect_same_bits_when_revoked(tag + " greedy picks", size_t(M), 6,
                                          [&](ThreadPool& p, float* y) {
                                            ops::matmul_argmax(x.data(), M, w, screen, reinterpret_cast<int32_t*>(y), p);
                                          },
                                          revoked);
          }
          if (!pw.repacked()) continue;
          expect_same_bits_when_revoked(tag + " prepacked", size_t(M * N), 6,
                                        [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, pw.matrix(), y, p); },
                                        revoked);
          expect_same_bits_when_revoked(tag + " prepacked, two weights of one input", size_t(2 * M * N), 6,
                                        [&](ThreadPool& p, float* y) {
                                          const ops::MatmulOut outs[2] = {{&pw.matrix(), y}, {&pw.matrix(), y + M * N}};
                                          ops::matmul_same_input(x.data(), M, outs, 2, p);
                                        },
                                        revoked);
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
                                    [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, pb.matrix(), y, p); }, revoked);
      expect_same_bits_when_revoked(tag + " f16", size_t(M * N), 6,
                                    [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, pf.matrix(), y, p); }, revoked);
      expect_same_bits_when_revoked(tag + " q8", size_t(M * N), 6,
                                    [&](ThreadPool& p, float* y) { ops::matmul(x.data(), M, q8.matrix(), y, p); }, revoked);
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
                                    revoked);
    }
    const int64_t rows = 64, dim = 1024;
    const auto g = test::randn(size_t(rows * dim), 26), u = test::randn(size_t(rows * dim), 27),
               nw = test::randn(size_t(dim), 28);
    expect_same_bits_when_revoked(path.name + " rms_norm", size_t(rows * dim), 6,
                                  [&](ThreadPool& p, float* y) { ops::rms_norm(g.data(), nw.data(), rows, dim, 1e-6f, y, &p); },
                                  revoked);
    expect_same_bits_when_revoked(path.name + " silu_mul", size_t(rows * dim), 6,
                                  [&](ThreadPool& p, float* y) { ops::silu_mul(g.data(), u.data(), rows * dim, y, &p); }, revoked);
    expect_same_bits_when_revoked(path.name + " gelu_tanh_mul", size_t(rows * dim), 6,
                                  [&](ThreadPool& p, float* y) { ops::gelu_tanh_mul(g.data(), u.data(), rows * dim, y, &p); },
                                  revoked);
  }
  std::printf("workers revoked inside or between chunks: %llu (pool of %d threads, %d hardware threads)\n",
              static_cast<unsigned long long>(revoked), revoking_threads(), hardware_threads());
  // Over this many jobs workers are often still inside a chunk when the caller runs out
  // (1,170–1,222 revocations a run on a 2-core machine); a run with none would have tested nothing.
  if (ThreadPool::redo_supported()) {
    EXPECT_GT(revoked, 0u);
  }
}

}  // namespace
}  // namespace dfl
