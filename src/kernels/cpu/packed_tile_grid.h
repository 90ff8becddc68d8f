// The grid of the packed 16-output tiles (16 outputs × 32 k per tile chunk, 512 16-bit
// elements), shared by the kernels that stream them without AMX: BF16 in the kPackedAmxBf16
// layout ([16 k-pairs][16 n][2]; cpu/matmul_avx512.cc: vdpbf16ps and its fp32-FMA form) and F16
// in kPackedF16x16 ([32 k][16 n]; the FMA form), on AVX-512 and AVX2 (cpu/packed_fma_avx2.cc).
// Lanes are outputs, and each (row, output) accumulator walks k in order whatever M, the
// grouping or the thread count (batch invariant).
// Only who computes what is decided here, never the arithmetic.
// Include from ISA kernel files only, after <immintrin.h>, <vector> and cpu_kernels.h:
// everything here is in an anonymous namespace, so each kernel file has its own copy compiled
// with its own flags (none can reach code of another ISA level).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/threadpool.h"

namespace dfl::cpu {
namespace {

constexpr int64_t kPackTile = 16 * 32;  // bf16 elements of one packed 16 n × 32 k tile

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// x [M, K] → fp32 copies zero-padded to Kp, rows xs floats apart (the F16 form's activations).
inline void copy_fp32_rows(const float* x, int64_t M, int64_t K, int64_t Kp, int64_t xs, float* xf) {
  for (int64_t m = 0; m < M; ++m) {
    std::memcpy(xf + m * xs, x + m * K, static_cast<size_t>(K) * sizeof(float));
    std::memset(xf + m * xs + K, 0, static_cast<size_t>(Kp - K) * sizeof(float));
  }
}

// Where a micro-kernel's G weight tiles start: ts apart (the matmul's walk over neighbouring
// tiles; cpu/matmul_avx512.cc also lists them one by one for the greedy screen's finish).
struct StridedTiles {
  const uint16_t* w;
  int64_t ts;
  const uint16_t* operator[](int g) const { return w + g * ts; }
};

// Tiles to pull into L2 while a micro-kernel reads its own: tile g (bit g of `tiles`) at
// w + g·ts, a line of it beside each line of the kernel's own tile g.
struct Pull {
  const uint16_t* w = nullptr;
  int64_t ts = 0;
  unsigned tiles = 0;
};

// Where a micro-kernel's activation rows start (T: uint16_t bf16 rows, float fp32 copies):
// row i of the block, xs elements apart, shared by every tile.
template <class T>
struct SharedRows {
  static constexpr bool kPerTile = false;
  const T* x;
  int64_t xs;
  const T* row(int i, int) const { return x + i * xs; }
};

// The activation copy a kernel reads, made by each pool thread for itself on its first group
// (thread 0, the caller, in the scratch it passed; a worker in its own buffer): no thread waits
// for a serial conversion, and none reads a copy that another core wrote. (A pure function of
// x: every copy holds the same values.)
template <class T>
class ThreadCopies {
 public:
  ThreadCopies(int n_threads, T* caller, int64_t n) : caller_(caller), n_(n) {
    thread_local std::vector<const T*> made;
    made.assign(static_cast<size_t>(n_threads), nullptr);
    made_ = made.data();
  }
  template <class Convert>
  const T* get(int tid, Convert&& convert) {
    if (made_[tid]) return made_[tid];
    T* dst = caller_;
    if (tid != 0) {
      // In a worker: the worker's own. Touched and grown in a NoAbandon scope (redoable jobs: the
      // first touch on a thread registers its destructor with calloc; a resize allocates). The
      // scope may run on after the job has ended, when this object is gone: it uses only `need`,
      // loaded before it.
      const size_t need = static_cast<size_t>(n_ + 64 / sizeof(T));
      T* own_data;
      {
        ThreadPool::NoAbandon keep;
        thread_local std::vector<T> own;
        if (own.size() < need) own.resize(need);
        own_data = own.data();
      }
      dst = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(own_data) + 63) & ~uintptr_t(63));
    }
    convert(dst);
    return made_[tid] = dst;
  }

 private:
  T* caller_;
  int64_t n_;
  const T** made_;
};

// The packed-layout drivers walk one grid: the tiles in groups of G (the last, partial group one
// tile at a time) on the pool, the rows in blocks of MR. run(g, mr, xr, wt, n0, N, yr, pull) runs
// one micro-kernel of g tiles (G or 1) from tile pointer wt / output n0 of a weight of N outputs
// over mr rows: activations from xr (this thread's copy: ThreadCopies over `caller_copy`, made
// by convert(dst), rows xs apart), results to yr (rows N apart), pulling `pull`'s tiles into L2
// along the way. Several weights of one input (PackedPart: same K) are one pool job, their
// groups one after the other.
struct PackedPart {
  const uint16_t* wp;  // the packed tiles
  int64_t N;           // outputs
  float* y;            // [M, N]
};
template <class T, class Convert, class Run>
void walk_packed_tiles(int64_t M, const PackedPart* parts, int n_parts, int64_t n_kc, int G, int64_t MR,
                       T* caller_copy, int64_t xs, Convert&& convert, ThreadPool& pool, Run&& run) {
  ThreadCopies<T> copies(pool.n_threads(), caller_copy, M * xs);
  auto rows = [&](const PackedPart& pp, int g, int64_t mr, int64_t m0, const uint16_t* wt, int64_t n0, Pull pull,
                  int tid) {
    run(g, mr, copies.get(tid, convert) + m0 * xs, wt, n0, pp.N, pp.y + m0 * pp.N, pull);
  };
  auto groups_of = [G](int64_t N) { return ((N + 15) / 16 + G - 1) / G; };
  int64_t n_groups = 0;
  for (int i = 0; i < n_parts; ++i) n_groups += groups_of(parts[i].N);
  pool.parallel_for_redoable(n_groups, [&](int64_t g0, int64_t g1, int tid) {
    int part = 0;
    int64_t first = 0;  // the global index of part's first group
    for (int64_t gi = g0; gi < g1; ++gi) {
      while (gi >= first + groups_of(parts[part].N)) first += groups_of(parts[part++].N);
      const PackedPart& pp = parts[part];
      const int64_t n_tiles = (pp.N + 15) / 16, t0 = (gi - first) * G, nt = min64(G, n_tiles - t0);
      // Several row blocks (passes) over a group: the first would stream its tiles from DRAM
      // and the others compute from cache, one after the other. So pass p pulls the next
      // group's tiles g ≡ p (mod passes) into L2 as it goes, and the stream overlaps the FMAs
      // (Emerald Rapids, 0.6B bf16 verify t(16) −3–8 % while 16 FMA rows took two passes; they
      // now take one, so this serves longer blocks and the vdpbf16ps form's 6-row passes). The
      // next group may open the next part.
      const int64_t passes = (M + MR - 1) / MR;
      const uint16_t* next = nullptr;
      int64_t n_next = 0;
      if (passes > 1 && gi + 1 < g1) {
        if (t0 + G < n_tiles) {
          next = pp.wp + (t0 + G) * n_kc * kPackTile;
          n_next = min64(G, n_tiles - t0 - G);
        } else if (part + 1 < n_parts) {
          next = parts[part + 1].wp;
          n_next = min64(G, (parts[part + 1].N + 15) / 16);
        }
      }
      for (int64_t m0 = 0, pass = 0; m0 < M; m0 += MR, ++pass) {
        const int64_t mr = min64(MR, M - m0);
        if (nt == G) {
          Pull pull{next, n_kc * kPackTile, 0};
          for (int64_t g = pass; g < n_next; g += passes) pull.tiles |= 1u << g;
          rows(pp, G, mr, m0, pp.wp + t0 * n_kc * kPackTile, t0 * 16, pull, tid);
          continue;
        }
        for (int64_t t = 0; t < nt; ++t)
          rows(pp, 1, mr, m0, pp.wp + (t0 + t) * n_kc * kPackTile, (t0 + t) * 16, Pull{}, tid);
      }
    }
  });
}

}  // namespace
}  // namespace dfl::cpu
