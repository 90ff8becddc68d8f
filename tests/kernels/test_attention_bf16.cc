// ops::attention over bf16, head-major KV pages (ops.h KvPages kBF16) against two oracles:
//   - the fp32 attention of the same path over a contiguous fp32 cache holding the bf16-rounded
//     K/V: bit-identical on every path (portable, AVX-512 fp32, bf16 prefill on AMX or AVX-512
//     BF16), since each kernel widens bf16 exactly and runs its fp32 arithmetic (the bf16
//     prefill: the same packed tile bytes);
//   - the double reference over the rounded values (NMSE < 1e-10 on the fp32 paths), whose bf16
//     form equals its fp32 form bit for bit.
// Pages are shuffled in memory, sizes 16 / 32 / 64 / a single page, with finite garbage in empty
// rows and unused rows (what a KV pool's recycled pages hold); GQA, d_qk != d_v, odd dims,
// sinks, every window kind, n_q across the bf16 prefill threshold, 1 / 2 / 3 threads; and batch
// invariance: decode rows computed one at a time equal the verify block, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "core/cpu_features.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace dfl {
namespace {

using test::randn;

using Case = test::AttnCase;
using Data = test::AttnData;  // (test_attention_bf16: k, v already bf16-rounded)

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Random Q, K, V (K/V rounded to bf16), positions 0..n_kv-1 (ring-rotated when `rotate`), some
// empty slots (never the queries' own keys).
Data make_data(const Case& c, int64_t n_q, int64_t n_kv, uint32_t seed, bool rotate) {
  Data d;
  d.q = randn(n_q * c.n_heads * c.d_qk, seed);
  d.k = randn(n_kv * c.n_kv_heads * c.d_qk, seed + 1);
  d.v = randn(n_kv * c.n_kv_heads * c.d_v, seed + 2);
  for (float& x : d.k) x = round_bf16(3.0f * x);
  for (float& x : d.v) x = round_bf16(x);
  d.sinks = randn(c.n_heads, seed + 3);
  d.k_pos.resize(n_kv);
  std::iota(d.k_pos.begin(), d.k_pos.end(), 0);
  if (rotate) std::rotate(d.k_pos.begin(), d.k_pos.begin() + n_kv / 3, d.k_pos.end());
  std::mt19937 rng(seed * 5 + 3);
  for (int64_t j = 0; j < n_kv; ++j)
    if (d.k_pos[j] < n_kv - n_q && ((j / 16) % 7 == 3 || rng() % 6 == 0)) d.k_pos[j] = kEmptySlot;
  d.q_pos.resize(n_q);
  for (int64_t i = 0; i < n_q; ++i) d.q_pos[i] = static_cast<int32_t>(n_kv - n_q + i);
  return d;
}

AttnParams params(const Case& c, Window w, const Data& d, bool sinks) {
  return test::attn_params(c, w, d, sinks);
}

// The same slots as bf16 head-major pages of `page_slots` rows (0: one page of n_kv rounded up
// to 16), placed in shuffled order among 3 unused pages. Empty and unused rows hold finite
// garbage (positions of unused rows: 0, visible — a kernel reading past n_slots would show it).
struct Bf16Cache {
  std::vector<uint16_t> kbuf, vbuf;
  std::vector<int32_t> pbuf;
  std::vector<const uint16_t*> kp, vp;
  std::vector<const int32_t*> pp;
  KvPages kv;
};

void paginate_bf16(const Case& c, const Data& d, int64_t n_kv, int32_t page_slots, uint32_t seed,
                   Bf16Cache& pc) {
  const int64_t rows = page_slots > 0 ? page_slots : std::max<int64_t>(16, (n_kv + 15) / 16 * 16);
  const int64_t n_pages = (n_kv + rows - 1) / rows, n_phys = n_pages + 3;
  std::vector<int64_t> perm(n_phys);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t kpage = rows * c.n_kv_heads * c.d_qk, vpage = rows * c.n_kv_heads * c.d_v;
  pc.kbuf.resize(n_phys * kpage);
  pc.vbuf.resize(n_phys * vpage);
  for (auto& x : pc.kbuf) x = f32_to_bf16(float(int(rng() % 2001) - 1000) * 1e3f);  // finite garbage
  for (auto& x : pc.vbuf) x = f32_to_bf16(float(int(rng() % 2001) - 1000) * 1e3f);
  pc.pbuf.assign(n_phys * rows, 0);
  pc.kp.resize(n_pages);
  pc.vp.resize(n_pages);
  pc.pp.resize(n_pages);
  for (int64_t g = 0; g < n_pages; ++g) {
    pc.kp[g] = pc.kbuf.data() + perm[g] * kpage;
    pc.vp[g] = pc.vbuf.data() + perm[g] * vpage;
    pc.pp[g] = pc.pbuf.data() + perm[g] * rows;
  }
  for (int64_t j = 0; j < n_kv; ++j) {
    const int64_t g = j / rows, r = j % rows, ph = perm[g];
    pc.pbuf[ph * rows + r] = d.k_pos[j];
    if (d.k_pos[j] == kEmptySlot) continue;  // garbage stays
    for (int32_t h = 0; h < c.n_kv_heads; ++h) {
      for (int32_t e = 0; e < c.d_qk; ++e)
        pc.kbuf[ph * kpage + kv_bf16_k_index(rows, c.d_qk, h, r, e)] =
            f32_to_bf16(d.k[(j * c.n_kv_heads + h) * c.d_qk + e]);
      for (int32_t e = 0; e < c.d_v; ++e)
        pc.vbuf[ph * vpage + kv_bf16_v_index(rows, c.d_v, h, r, e)] =
            f32_to_bf16(d.v[(j * c.n_kv_heads + h) * c.d_v + e]);
    }
  }
  pc.kv = KvPages{};
  pc.kv.pos = pc.pp.data();
  pc.kv.n_slots = n_kv;
  pc.kv.page_slots = static_cast<int32_t>(rows);
  pc.kv.dtype = KvDtype::kBF16;
  pc.kv.k16 = pc.kp.data();
  pc.kv.v16 = pc.vp.data();
}

// The fp32 contiguous copy: empty slots NaN (the fp32 kernels never read them).
void fp32_with_nan_holes(const Case& c, Data& d) {
  for (size_t j = 0; j < d.k_pos.size(); ++j)
    if (d.k_pos[j] == kEmptySlot)
      for (int32_t h = 0; h < c.n_kv_heads; ++h) {
        d.k[(j * c.n_kv_heads + h) * c.d_qk] = NAN;
        d.v[(j * c.n_kv_heads + h) * c.d_v] = NAN;
      }
}

using test::attention_paths;
using test::PathConfig;
using test::PathScope;

const Window kWindows[] = {{-1, 0}, {-1, -1}, {7, 0}, {3, 3}, {0, 0}, {20, -1}};

TEST(AttentionBf16Kv, EqualsFp32OverRoundedValuesOnEveryPath) {
  ThreadPool p1(1), p2(2), p3(3);
  ThreadPool* pools[] = {&p1, &p2, &p3};
  const Case cases[] = {{4, 4, 16, 16}, {8, 2, 64, 64}, {4, 1, 192, 128}, {6, 3, 24, 40},
                        {2, 2, 130, 7},  {16, 2, 32, 48}, {3, 1, 41, 72}, {8, 1, 128, 128}};
  const int64_t n_qs[] = {1, 2, 5, 16, 31, 64, 65, 130};
  const int32_t page_sizes[] = {16, 32, 64, 0};
  int calls = 0;
  double worst = 0;
  for (const PathConfig& path : attention_paths()) {
    PathScope scope(path);
    std::mt19937 rng(77);
    for (int trial = 0; trial < 40; ++trial) {
      const Case& c = cases[trial % std::size(cases)];
      const int64_t n_q = n_qs[trial % std::size(n_qs)];
      const int64_t per_slot = n_q * c.n_heads * (c.d_qk + c.d_v);
      const int64_t extra = std::min<int64_t>(300, std::max<int64_t>(17, 30'000'000 / per_slot));
      const int64_t n_kv = n_q + static_cast<int64_t>(rng() % extra);
      const Window w = kWindows[(trial / 2) % std::size(kWindows)];
      const bool sinks = trial % 3 != 1;
      const uint32_t seed = 700 + trial;
      Data d = make_data(c, n_q, n_kv, seed, trial % 2 == 1);
      const AttnParams p = params(c, w, d, sinks);
      const int64_t n_out = n_q * c.n_heads * c.d_v;
      std::vector<Bf16Cache> caches(std::size(page_sizes));
      for (size_t ps = 0; ps < std::size(page_sizes); ++ps)
        paginate_bf16(c, d, n_kv, page_sizes[ps], seed * 13 + uint32_t(ps), caches[ps]);
      fp32_with_nan_holes(c, d);
      const std::string what = path.name + " heads " + std::to_string(c.n_heads) + "/" +
                               std::to_string(c.n_kv_heads) + " d " + std::to_string(c.d_qk) +
                               "/" + std::to_string(c.d_v) + " win " + std::to_string(w.left) +
                               "," + std::to_string(w.right) + " sinks " + std::to_string(sinks) +
                               " n_q " + std::to_string(n_q) + " n_kv " + std::to_string(n_kv);
      std::vector<float> fp32(n_out, NAN), r(n_out), rb(n_out);
      ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(), n_kv,
                     p, fp32.data(), *pools[trial % 3]);
      ref::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(), n_kv,
                     p, r.data());
      // bf16 products: the AVX-512 prefill engines (AVX2's prefill tiles are fp32: the fp32 bounds).
      const bool bf16_path = uses_prefill_attention(n_q) && cpu_isa() == IsaLevel::kAvx512;
      ASSERT_LT(test::nmse(fp32.data(), r.data(), n_out), bf16_path ? 1e-4 : 1e-10) << what;
      if (!bf16_path) worst = std::max(worst, test::max_abs_diff(fp32.data(), r.data(), n_out));
      for (size_t ps = 0; ps < caches.size(); ++ps) {
        ThreadPool& pool = *pools[(trial + ps) % 3];
        std::vector<float> got(n_out, NAN);
        ops::attention(d.q.data(), d.q_pos.data(), n_q, caches[ps].kv, p, got.data(), pool);
        ++calls;
        ASSERT_EQ(0, std::memcmp(got.data(), fp32.data(), n_out * 4))
            << what << " page_slots " << caches[ps].kv.page_slots << " threads " << pool.n_threads();
        if (ps == 0) {
          ref::attention(d.q.data(), d.q_pos.data(), n_q, caches[ps].kv, p, rb.data());
          ASSERT_EQ(0, std::memcmp(rb.data(), r.data(), n_out * 4)) << what << " (reference)";
        }
      }
    }
  }
  std::printf("bf16 KV attention: %d calls bit-identical to fp32 over the rounded K/V; worst max "
              "|diff| of the fp32 paths vs the double reference %.3g\n", calls, worst);
}

// Decode rows one at a time == the rows of one verify block (and any thread count), over a long
// bf16 cache in the engine's page-16 block-table style: the batch invariance lossless needs.
// Also a Gemma-3-270M group (4 heads on 1 kv head, d 256): a decode row there is one task, which
// pools of 2 and 3 threads split into head chunks.
TEST(AttentionBf16Kv, VerifyBlockRowsEqualSingleRowDecodes) {
  ThreadPool p1(1), p2(2), p3(3);
  const Case cases[] = {{8, 2, 64, 32}, {4, 1, 256, 256}};
  const int64_t n_kv = 1000, n_q = 16;
  for (const Case& c : cases)
    for (const PathConfig& path : attention_paths()) {
      PathScope scope(path);
      Data d = make_data(c, n_q, n_kv, 42, false);
      Bf16Cache pc;
      paginate_bf16(c, d, n_kv, 16, 9, pc);
      const AttnParams p = params(c, Window{-1, 0}, d, true);
      const int64_t row = c.n_heads * c.d_v;
      std::vector<float> block(n_q * row, NAN);
      ops::attention(d.q.data(), d.q_pos.data(), n_q, pc.kv, p, block.data(), p3);
      for (int64_t i = 0; i < n_q; ++i)
        for (ThreadPool* pool : {&p1, &p2, &p3}) {
          std::vector<float> one(row, NAN);
          ops::attention(d.q.data() + i * c.n_heads * c.d_qk, d.q_pos.data() + i, 1, pc.kv, p,
                         one.data(), *pool);
          ASSERT_EQ(0, std::memcmp(one.data(), block.data() + i * row, row * 4))
              << path.name << " heads " << c.n_heads << "/" << c.n_kv_heads << " row " << i
              << " threads " << pool->n_threads();
        }
    }
}

}  // namespace
}  // namespace dfl
