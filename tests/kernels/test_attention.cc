// ops::attention vs the scalar reference (double) and metamorphic properties:
//   - every visibility mask (causal, sliding causal, sliding non-causal, non-causal), sinks,
//     GQA, d_qk != d_v, odd head dims, empty slots, permuted (ring-buffer) slot order;
//   - a window of w == full causal attention over the last w keys;
//   - the built-in window path == an explicit mask (invisible keys turned into empty slots),
//     bit for bit;
//   - batched queries == one query at a time, and any thread count, bit for bit;
//   - a sink s_h == an extra key with logit s_h and a zero value.
// Bounds: NMSE < 1e-10 and max |diff| < 1e-5 vs the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "kernel_test_util.h"
#include "core/cpu_features.h"
#include "kernels/ops.h"

namespace dfl {
namespace {

using test::randn;

using Case = test::AttnCase;
using Data = test::AttnData;

Data make_data(const Case& c, int64_t n_q, int64_t n_kv, uint32_t seed, bool holes, bool permute) {
  Data d;
  d.q = randn(n_q * c.n_heads * c.d_qk, seed);
  d.k = randn(n_kv * c.n_kv_heads * c.d_qk, seed + 1);
  d.v = randn(n_kv * c.n_kv_heads * c.d_v, seed + 2);
  d.sinks = randn(c.n_heads, seed + 3);
  d.k_pos.resize(n_kv);
  std::iota(d.k_pos.begin(), d.k_pos.end(), 0);
  if (permute) std::rotate(d.k_pos.begin(), d.k_pos.begin() + n_kv / 3, d.k_pos.end());
  if (holes)
    for (int64_t j = 0; j < n_kv; j += 5) {
      d.k_pos[j] = kEmptySlot;
      // Garbage in empty slots must not leak into the result.
      for (int32_t h = 0; h < c.n_kv_heads; ++h)
        d.v[(j * c.n_kv_heads + h) * c.d_v] = NAN;
    }
  d.q_pos.resize(n_q);
  for (int64_t i = 0; i < n_q; ++i) d.q_pos[i] = static_cast<int32_t>(n_kv - n_q + i);
  return d;
}

AttnParams params(const Case& c, Window w, const Data& d, bool sinks) {
  return test::attn_params(c, w, d, sinks);
}

const Case kCases[] = {{4, 4, 16, 16}, {8, 2, 64, 64}, {4, 1, 192, 128}, {6, 3, 24, 40}, {2, 2, 130, 7}};
const Window kWindows[] = {{-1, 0}, {-1, -1}, {7, 0}, {3, 3}, {0, 0}, {20, -1}};

TEST(Attention, MatchesReference) {
  ThreadPool pool(2);
  for (IsaLevel isa : test::attention_levels()) {
    test::IsaScope scope(isa);
    uint32_t seed = 1;
    for (const Case& c : kCases)
      for (Window w : kWindows)
        for (bool sinks : {false, true})
          for (int64_t n_kv : {1, 40, 100})
            for (int64_t n_q : {1, 16}) {
              if (n_q > n_kv) continue;
              const bool holes = n_kv > 20, permute = n_kv == 40;
              Data d = make_data(c, n_q, n_kv, seed++, holes, permute);
              const AttnParams p = params(c, w, d, sinks);
              std::vector<float> o(n_q * c.n_heads * c.d_v, NAN), r(o.size());
              ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(),
                             d.k_pos.data(), n_kv, p, o.data(), pool);
              ref::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(),
                             d.k_pos.data(), n_kv, p, r.data());
              ASSERT_LT(test::nmse(o.data(), r.data(), o.size()), 1e-10)
                  << isa_name(isa) << " heads " << c.n_heads << "/" << c.n_kv_heads << " d "
                  << c.d_qk << "/" << c.d_v << " win " << w.left << "," << w.right
                  << " sinks " << sinks << " n_kv " << n_kv << " n_q " << n_q;
              ASSERT_LT(test::max_abs_diff(o.data(), r.data(), o.size()), 1e-5);
            }
  }
}

TEST(Attention, NothingVisibleGivesZeros) {
  ThreadPool pool(1);
  const Case c{2, 1, 16, 16};
  Data d = make_data(c, 1, 8, 5, false, false);
  d.q_pos[0] = 100;  // window (3,0): all keys too old
  const AttnParams p = params(c, Window{3, 0}, d, false);
  std::vector<float> o(c.n_heads * c.d_v, NAN);
  ops::attention(d.q.data(), d.q_pos.data(), 1, d.k.data(), d.v.data(), d.k_pos.data(), 8, p,
                 o.data(), pool);
  for (float x : o) EXPECT_EQ(x, 0.0f);
}

TEST(Attention, WindowEqualsLastKeys) {
  ThreadPool pool(2);
  const Case c{8, 2, 64, 64};
  const int64_t n_kv = 77, wlen = 19;
  Data d = make_data(c, 1, n_kv, 9, false, false);
  const AttnParams pw = params(c, Window{wlen - 1, 0}, d, false);
  const AttnParams pf = params(c, Window{-1, 0}, d, false);
  std::vector<float> ow(c.n_heads * c.d_v), of(ow.size());
  ops::attention(d.q.data(), d.q_pos.data(), 1, d.k.data(), d.v.data(), d.k_pos.data(), n_kv, pw,
                 ow.data(), pool);
  const int64_t s0 = n_kv - wlen;
  ops::attention(d.q.data(), d.q_pos.data(), 1, d.k.data() + s0 * c.n_kv_heads * c.d_qk,
                 d.v.data() + s0 * c.n_kv_heads * c.d_v, d.k_pos.data() + s0, wlen, pf, of.data(),
                 pool);
  EXPECT_LT(test::max_abs_diff(ow.data(), of.data(), ow.size()), 1e-6);
}

TEST(Attention, WindowEqualsExplicitMaskBitExact) {
  ThreadPool pool(2);
  for (IsaLevel isa : test::attention_levels()) {
    test::IsaScope scope(isa);
    for (Window w : kWindows) {
      const Case c{4, 2, 48, 32};
      const int64_t n_kv = 53, n_q = 6;
      Data d = make_data(c, n_q, n_kv, 21, true, true);
      const AttnParams p = params(c, w, d, true);
      std::vector<float> ob(n_q * c.n_heads * c.d_v);
      ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(),
                     n_kv, p, ob.data(), pool);
      AttnParams pm = p;
      pm.window = Window{-1, -1};
      for (int64_t i = 0; i < n_q; ++i) {
        std::vector<int32_t> masked(d.k_pos);
        for (auto& kp : masked)
          if (!kv_visible(d.q_pos[i], kp, w)) kp = kEmptySlot;
        std::vector<float> oi(c.n_heads * c.d_v);
        ops::attention(d.q.data() + i * c.n_heads * c.d_qk, d.q_pos.data() + i, 1, d.k.data(),
                       d.v.data(), masked.data(), n_kv, pm, oi.data(), pool);
        ASSERT_EQ(0, std::memcmp(oi.data(), ob.data() + i * oi.size(), oi.size() * 4))
            << isa_name(isa) << " window " << w.left << "," << w.right << " query " << i;
      }
    }
  }
}

TEST(Attention, BatchedEqualsOneByOneAndThreadInvariant) {
  ThreadPool p1(1), p2(2), p3(3);
  for (IsaLevel isa : test::attention_levels()) {
    test::IsaScope scope(isa);
    for (const Case& c : kCases) {
      const int64_t n_kv = 70, n_q = 16;
      Data d = make_data(c, n_q, n_kv, 33, true, false);
      const AttnParams p = params(c, Window{-1, 0}, d, true);
      const int64_t row = c.n_heads * c.d_v;
      std::vector<float> one(n_q * row);
      for (int64_t i = 0; i < n_q; ++i)
        ops::attention(d.q.data() + i * c.n_heads * c.d_qk, d.q_pos.data() + i, 1, d.k.data(),
                       d.v.data(), d.k_pos.data(), n_kv, p, one.data() + i * row, p1);
      for (ThreadPool* pool : {&p1, &p2, &p3}) {
        std::vector<float> all(n_q * row);
        ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(),
                       n_kv, p, all.data(), *pool);
        ASSERT_EQ(0, std::memcmp(all.data(), one.data(), all.size() * 4))
            << isa_name(isa) << " threads " << pool->n_threads() << " d " << c.d_qk;
      }
    }
  }
}

// Prefill-length query runs take the packed-K/V, query-tiled path; wide GQA groups (more heads
// per kv head than one tile holds) are split into head chunks. Both must equal the one-query
// path bit for bit, for every mask, with holes (NaN values) and ring-permuted slots.
TEST(Attention, LongQueryRunsAndWideGroupsEqualOneByOne) {
  ThreadPool p1(1), p2(2);
  const Case cases[] = {{4, 4, 32, 16}, {8, 2, 64, 48}, {66, 1, 16, 16}, {20, 2, 48, 32}};
  for (IsaLevel isa : test::attention_levels()) {
    test::IsaScope scope(isa);
    for (const Case& c : cases)
      for (Window w : kWindows) {
        const int64_t n_kv = 90, n_q = 41;
        Data d = make_data(c, n_q, n_kv, 77, true, true);
        const AttnParams p = params(c, w, d, true);
        const int64_t row = c.n_heads * c.d_v;
        std::vector<float> one(n_q * row), ref_out(n_q * row);
        for (int64_t i = 0; i < n_q; ++i)
          ops::attention(d.q.data() + i * c.n_heads * c.d_qk, d.q_pos.data() + i, 1, d.k.data(),
                         d.v.data(), d.k_pos.data(), n_kv, p, one.data() + i * row, p1);
        ref::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(),
                       n_kv, p, ref_out.data());
        ASSERT_LT(test::nmse(one.data(), ref_out.data(), one.size()), 1e-10);
        for (ThreadPool* pool : {&p1, &p2}) {
          std::vector<float> all(n_q * row);
          ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(),
                         d.k_pos.data(), n_kv, p, all.data(), *pool);
          ASSERT_EQ(0, std::memcmp(all.data(), one.data(), all.size() * 4))
              << isa_name(isa) << " heads " << c.n_heads << "/" << c.n_kv_heads << " win "
              << w.left << "," << w.right << " threads " << pool->n_threads();
        }
      }
  }
}

// Prefill-length runs (n_q >= kPrefillAttentionMinQueries, ops.h) on each engine this machine
// has: bf16 products on AVX-512 (AVX-512 BF16 dot products, AMX tiles), fp32 query × key tiles
// on AVX2. Against the double reference (bf16-sized bounds, the fp32 test bounds on AVX2), for
// every mask, sinks, GQA, d_qk != d_v, odd dims, holes (NaN values) and ring order;
// bit-identical across thread counts and across different groupings of the same rows into
// query tiles.
// The bf16 prefill attention's FMA engine (ops.h Bf16Dot::kFma) against its vdpbf16ps engine:
// the same bits on Intel CPUs (the FMA form is vdpbf16ps's sequence there), fp32-rounding
// close elsewhere.
TEST(Attention, Bf16PrefillFmaEngineIsVdpbf16psOnIntel) {
  if (cpu_isa() != IsaLevel::kAvx512) GTEST_SKIP() << "no AVX-512 BF16 on this machine";
  ThreadPool pool(2);
  set_amx_enabled(false);
  const Bf16Dot before = bf16_dot();
  int64_t compared = 0, differing = 0;
  for (const Case& c : {Case{4, 4, 64, 64}, Case{8, 2, 128, 128}, Case{6, 3, 24, 40}})
    for (Window w : kWindows) {
      const int64_t n_kv = 150, n_q = 100;
      Data d = make_data(c, n_q, n_kv, 93, true, true);
      const AttnParams p = params(c, w, d, true);
      std::vector<float> od(n_q * c.n_heads * c.d_v), of(od.size());
      set_bf16_dot(Bf16Dot::kDpbf16);
      ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(), n_kv,
                     p, od.data(), pool);
      set_bf16_dot(Bf16Dot::kFma);
      ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(), n_kv,
                     p, of.data(), pool);
      for (size_t i = 0; i < od.size(); ++i) differing += std::memcmp(&od[i], &of[i], 4) != 0;
      compared += static_cast<int64_t>(od.size());
      ASSERT_LT(test::nmse(of.data(), od.data(), od.size()), 1e-8);  // fp32 rounding apart at most
    }
  set_bf16_dot(before);
  set_amx_enabled(true);
  std::printf("bf16 prefill attention, FMA vs vdpbf16ps engine: %lld of %lld outputs differ (Intel: %d)\n",
              static_cast<long long>(differing), static_cast<long long>(compared), cpu_features().intel);
  if (cpu_features().intel) {
    EXPECT_EQ(differing, 0);
  }
}

TEST(Attention, PrefillMatchesReferenceAndIsInvariant) {
  ThreadPool p1(1), p2(2), p3(3);
  const Case cases[] = {{4, 4, 64, 64}, {8, 2, 128, 128}, {4, 1, 192, 128}, {6, 3, 24, 40},
                        {2, 2, 130, 7}};
  int engines = 0;
  for (const test::PathConfig& path : test::attention_paths()) {
  test::PathScope scope(path);
  if (!uses_prefill_attention(kPrefillAttentionMinQueries)) continue;
  ++engines;
  double worst = 0;
  for (const Case& c : cases)
    for (Window w : kWindows)
      for (bool sinks : {false, true}) {
        const int64_t n_kv = 150, n_q = 100, tail = kPrefillAttentionMinQueries;
        Data d = make_data(c, n_q, n_kv, 91, true, true);
        const AttnParams p = params(c, w, d, sinks);
        const int64_t row = c.n_heads * c.d_v;
        std::vector<float> o(n_q * row, NAN), r(n_q * row);
        ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(),
                       n_kv, p, o.data(), p2);
        ref::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(),
                       n_kv, p, r.data());
        const double err = test::max_abs_diff(o.data(), r.data(), o.size());
        worst = std::max(worst, err);
        const bool fp32 = path.isa == IsaLevel::kAvx2;  // the AVX2 engine multiplies in fp32
        ASSERT_LT(test::nmse(o.data(), r.data(), o.size()), fp32 ? 1e-10 : 1e-4)
            << path.name << " heads " << c.n_heads << "/" << c.n_kv_heads << " d " << c.d_qk
            << "/" << c.d_v << " win " << w.left << "," << w.right << " sinks " << sinks;
        ASSERT_LT(err, fp32 ? 1e-5 : 5e-2) << path.name;
        for (ThreadPool* pool : {&p1, &p3}) {
          std::vector<float> again(n_q * row);
          ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(),
                         d.k_pos.data(), n_kv, p, again.data(), *pool);
          ASSERT_EQ(0, std::memcmp(again.data(), o.data(), o.size() * 4)) << pool->n_threads();
        }
        // The last `tail` queries alone: other tile boundaries, same rows.
        std::vector<float> part(tail * row);
        ops::attention(d.q.data() + (n_q - tail) * c.n_heads * c.d_qk,
                       d.q_pos.data() + (n_q - tail), tail, d.k.data(), d.v.data(),
                       d.k_pos.data(), n_kv, p, part.data(), p2);
        ASSERT_EQ(0, std::memcmp(part.data(), o.data() + (n_q - tail) * row, part.size() * 4))
            << path.name << " win " << w.left << "," << w.right;
      }
  std::printf("prefill attention (%s): worst max |diff| vs double reference %.3g\n",
              path.name.c_str(), worst);
  }
  if (engines == 0) GTEST_SKIP() << "no AVX2 on this machine: the per-row fp32 path is the only one";
}

TEST(Attention, SinkEqualsZeroValueKey) {
  ThreadPool pool(1);
  const Case c{4, 4, 32, 24};  // no GQA: one extra key per head can carry that head's sink
  const int64_t n_kv = 30;
  Data d = make_data(c, 1, n_kv, 44, false, false);
  const AttnParams ps = params(c, Window{-1, 0}, d, true);
  std::vector<float> os(c.n_heads * c.d_v);
  ops::attention(d.q.data(), d.q_pos.data(), 1, d.k.data(), d.v.data(), d.k_pos.data(), n_kv, ps,
                 os.data(), pool);
  // Extra slot at the front: k_h = q_h · s_h / (scale · |q_h|²) so that scale · q_h·k_h = s_h.
  Data e = d;
  e.k.insert(e.k.begin(), c.n_kv_heads * c.d_qk, 0.0f);
  e.v.insert(e.v.begin(), c.n_kv_heads * c.d_v, 0.0f);
  e.k_pos.insert(e.k_pos.begin(), 0);
  for (int32_t h = 0; h < c.n_heads; ++h) {
    double qq = 0;
    for (int32_t i = 0; i < c.d_qk; ++i) qq += double(d.q[h * c.d_qk + i]) * d.q[h * c.d_qk + i];
    for (int32_t i = 0; i < c.d_qk; ++i)
      e.k[h * c.d_qk + i] = static_cast<float>(d.q[h * c.d_qk + i] * d.sinks[h] / (ps.scale * qq));
  }
  const AttnParams pe = params(c, Window{-1, 0}, e, false);
  std::vector<float> oe(os.size());
  ops::attention(e.q.data(), e.q_pos.data(), 1, e.k.data(), e.v.data(), e.k_pos.data(), n_kv + 1,
                 pe, oe.data(), pool);
  EXPECT_LT(test::max_abs_diff(os.data(), oe.data(), os.size()), 1e-5);
}

// ---- paged KV (ops.h KvPages) ------------------------------------------------------------------

// A paged copy of a contiguous cache: pages of `page_slots` rows placed in shuffled order in one
// pool that also holds unused pages; every row that holds no logical slot (unused pages, the tail
// of the last page) is NaN K/V at position 0 — visible, so a kernel that read past n_slots or
// used the wrong page would show it. page_slots <= 0: a single page of n_kv - page_slots rows.
struct PagedCache {
  std::vector<float> kbuf, vbuf;
  std::vector<int32_t> pbuf;
  std::vector<const float*> kp, vp;
  std::vector<const int32_t*> pp;
  KvPages kv;
};

void paginate(const Case& c, const Data& d, int64_t n_kv, int32_t page_slots, uint32_t seed,
              PagedCache& pc) {
  const bool single = page_slots <= 0;
  const int64_t rows = single ? n_kv - page_slots : page_slots;
  const int64_t n_pages = single ? 1 : (n_kv + rows - 1) / rows;
  const int64_t n_phys = n_pages + 3;
  std::vector<int64_t> perm(n_phys);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t kr = c.n_kv_heads * c.d_qk, vr = c.n_kv_heads * c.d_v;
  pc.kbuf.assign(n_phys * rows * kr, NAN);
  pc.vbuf.assign(n_phys * rows * vr, NAN);
  pc.pbuf.assign(n_phys * rows, 0);
  pc.kp.resize(n_pages);
  pc.vp.resize(n_pages);
  pc.pp.resize(n_pages);
  for (int64_t g = 0; g < n_pages; ++g) {
    pc.kp[g] = pc.kbuf.data() + perm[g] * rows * kr;
    pc.vp[g] = pc.vbuf.data() + perm[g] * rows * vr;
    pc.pp[g] = pc.pbuf.data() + perm[g] * rows;
  }
  for (int64_t j = 0; j < n_kv; ++j) {
    const int64_t g = j / rows, r = j % rows, ph = perm[g];
    std::memcpy(pc.kbuf.data() + (ph * rows + r) * kr, d.k.data() + j * kr, kr * 4);
    std::memcpy(pc.vbuf.data() + (ph * rows + r) * vr, d.v.data() + j * vr, vr * 4);
    pc.pbuf[ph * rows + r] = d.k_pos[j];
  }
  pc.kv = KvPages{pc.kp.data(), pc.vp.data(), pc.pp.data(), n_kv, static_cast<int32_t>(rows)};
}

// Holes (some whole 16-slot runs empty, so whole pages / blocks are skipped), NaN in the K and V
// of every empty slot, ring-rotated positions.
Data make_paged_data(const Case& c, int64_t n_q, int64_t n_kv, uint32_t seed) {
  Data d = make_data(c, n_q, n_kv, seed, false, (seed & 1) != 0);
  std::mt19937 rng(seed * 7 + 1);
  for (int64_t j = 0; j < n_kv; ++j) {
    const bool run_empty = (j / 16) % 7 == 3;
    if (!(run_empty || rng() % 6 == 0)) continue;
    if (d.k_pos[j] >= n_kv - n_q) continue;  // keep the queries' own keys
    d.k_pos[j] = kEmptySlot;
    for (int32_t h = 0; h < c.n_kv_heads; ++h) {
      d.k[(j * c.n_kv_heads + h) * c.d_qk + rng() % c.d_qk] = NAN;
      d.v[(j * c.n_kv_heads + h) * c.d_v + rng() % c.d_v] = NAN;
    }
  }
  return d;
}

using test::attention_paths;
using test::PathConfig;
using test::PathScope;

// The paged call == the contiguous call, bit for bit, on every path: random shapes (GQA,
// d_qk != d_v, odd dims), sinks, every window kind, empty slots with NaN K/V, page_slots
// 16/32/64/128 and single pages (exact and with a tail), pages shuffled in memory, n_q from 1 to
// 200 (across kPrefillAttentionMinQueries and the fp32 copy path), 1/2/3 threads; and close to the
// double reference (whose paged form equals its contiguous form bit for bit).
TEST(AttentionPaged, BitIdenticalToContiguousOnEveryPath) {
  ThreadPool p1(1), p2(2), p3(3);
  ThreadPool* pools[] = {&p1, &p2, &p3};
  const Case cases[] = {{4, 4, 16, 16}, {8, 2, 64, 64}, {4, 1, 192, 128}, {6, 3, 24, 40},
                        {2, 2, 130, 7},  {16, 2, 32, 48}, {3, 1, 40, 72}};
  const int64_t n_qs[] = {1, 2, 5, 16, 31, 63, 64, 65, 97, 130, 200};
  const int32_t page_sizes[] = {16, 32, 64, 128, 0, -7};
  static_assert(kPrefillAttentionMinQueries == 64, "n_q sweep crosses 64");
  double worst_fp32 = 0, worst_bf16 = 0;
  int calls = 0;
  for (const PathConfig& path : attention_paths()) {
    PathScope scope(path);
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 44; ++trial) {
      const Case& c = cases[trial % std::size(cases)];
      const int64_t n_q = n_qs[trial % std::size(n_qs)];
      // Keep the scalar paths' work bounded: fewer slots for wide heads and long query runs.
      const int64_t work_cap = 40'000'000;
      const int64_t per_slot = n_q * c.n_heads * (c.d_qk + c.d_v);
      const int64_t extra = std::min<int64_t>(260, std::max<int64_t>(17, work_cap / per_slot));
      const int64_t n_kv = n_q + static_cast<int64_t>(rng() % extra);
      const Window w = kWindows[(trial / 2) % std::size(kWindows)];
      const bool sinks = trial % 3 != 1;
      const uint32_t seed = 500 + trial;
      const Data d = make_paged_data(c, n_q, n_kv, seed);
      const AttnParams p = params(c, w, d, sinks);
      const int64_t n_out = n_q * c.n_heads * c.d_v;
      const std::string what = std::string(path.name) + " heads " + std::to_string(c.n_heads) +
                               "/" + std::to_string(c.n_kv_heads) + " d " +
                               std::to_string(c.d_qk) + "/" + std::to_string(c.d_v) + " win " +
                               std::to_string(w.left) + "," + std::to_string(w.right) +
                               " sinks " + std::to_string(sinks) + " n_q " + std::to_string(n_q) +
                               " n_kv " + std::to_string(n_kv);
      std::vector<float> contiguous(n_out, NAN), r(n_out), rp(n_out);
      ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(),
                     n_kv, p, contiguous.data(), *pools[trial % 3]);
      ref::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(),
                     n_kv, p, r.data());
      // bf16 products: the AVX-512 prefill engines (AVX2's prefill tiles are fp32: the fp32 bounds).
      const bool bf16_path = uses_prefill_attention(n_q) && cpu_isa() == IsaLevel::kAvx512;
      const double nm = test::nmse(contiguous.data(), r.data(), n_out);
      const double mad = test::max_abs_diff(contiguous.data(), r.data(), n_out);
      ASSERT_LT(nm, bf16_path ? 1e-4 : 1e-10) << what;
      ASSERT_LT(mad, bf16_path ? 5e-2 : 1e-5) << what;
      (bf16_path ? worst_bf16 : worst_fp32) = std::max(bf16_path ? worst_bf16 : worst_fp32, mad);
      for (size_t ps = 0; ps < std::size(page_sizes); ++ps) {
        PagedCache pc;
        paginate(c, d, n_kv, page_sizes[ps], seed * 31 + static_cast<uint32_t>(ps), pc);
        ThreadPool& pool = *pools[(trial + ps) % 3];
        std::vector<float> paged(n_out, NAN);
        ops::attention(d.q.data(), d.q_pos.data(), n_q, pc.kv, p, paged.data(), pool);
        ++calls;
        ASSERT_EQ(0, std::memcmp(paged.data(), contiguous.data(), n_out * 4))
            << what << " page_slots " << pc.kv.page_slots << " threads " << pool.n_threads();
        if (ps == 0 || ps == 4) {  // the paged reference: page 16 and a single page
          ref::attention(d.q.data(), d.q_pos.data(), n_q, pc.kv, p, rp.data());
          ASSERT_EQ(0, std::memcmp(rp.data(), r.data(), n_out * 4)) << what << " (reference)";
        }
      }
    }
  }
  std::printf("paged attention: %d paged calls bit-identical; worst max |diff| vs double "
              "reference: fp32 %.3g, bf16 prefill %.3g\n", calls, worst_fp32, worst_bf16);
}

// Decode / verify shapes over a long paged cache in the engine's block-table style (page 16,
// pages shuffled, many holes): paged == contiguous for query counts 1..20 and 1/2/3 threads,
// on every path.
TEST(AttentionPaged, DecodeAndVerifyOverLongCache) {
  ThreadPool p1(1), p2(2), p3(3);
  const Case c{8, 2, 64, 32};
  const int64_t n_kv = 1000;
  for (const PathConfig& path : attention_paths()) {
    PathScope scope(path);
    for (int64_t n_q = 1; n_q <= 20; n_q += (n_q < 4 ? 1 : 5)) {
      const Data d = make_paged_data(c, n_q, n_kv, 900 + static_cast<uint32_t>(n_q));
      const AttnParams p = params(c, Window{-1, 0}, d, n_q % 2 == 0);
      const int64_t n_out = n_q * c.n_heads * c.d_v;
      std::vector<float> contiguous(n_out);
      ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(),
                     n_kv, p, contiguous.data(), p1);
      PagedCache pc;
      paginate(c, d, n_kv, 16, 7 + static_cast<uint32_t>(n_q), pc);
      for (ThreadPool* pool : {&p1, &p2, &p3}) {
        std::vector<float> paged(n_out, NAN);
        ops::attention(d.q.data(), d.q_pos.data(), n_q, pc.kv, p, paged.data(), *pool);
        ASSERT_EQ(0, std::memcmp(paged.data(), contiguous.data(), n_out * 4))
            << path.name << " n_q " << n_q << " threads " << pool->n_threads();
      }
    }
  }
}

// An empty cache (n_slots = 0, null tables) reads nothing and gives zeros, sinks or not, on
// every path and for decode- and prefill-length query runs.
TEST(AttentionPaged, EmptyCacheGivesZeros) {
  ThreadPool pool(2);
  const Case c{4, 2, 32, 16};
  for (const PathConfig& path : attention_paths()) {
    PathScope scope(path);
    for (int64_t n_q : {1, 16, 100}) {
      const Data d = make_data(c, n_q, n_q, 5, false, false);
      for (bool sinks : {false, true}) {
        const AttnParams p = params(c, Window{-1, 0}, d, sinks);
        std::vector<float> o(n_q * c.n_heads * c.d_v, NAN);
        ops::attention(d.q.data(), d.q_pos.data(), n_q, KvPages{}, p, o.data(), pool);
        for (float x : o) ASSERT_EQ(x, 0.0f) << path.name << " n_q " << n_q << " sinks " << sinks;
      }
    }
  }
}

}  // namespace
}  // namespace dfl
