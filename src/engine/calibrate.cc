#include "engine/calibrate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace dfl {

// Unmeasured passes before each timed shape (calibrate.h: the first grows the buffers, the
// second the one-sequence forward's swapped logits buffer).
constexpr int32_t kWarm = 2;

std::vector<double> measure_verify_curve(CausalLM& target, int32_t seq,
                                         const std::vector<int32_t>& blocks, int32_t context,
                                         int32_t repeats, const std::vector<int32_t>* aux,
                                         bool argmax_only, const std::vector<int32_t>* text) {
  using Clock = std::chrono::steady_clock;
  int32_t max_b = 0;
  for (int32_t b : blocks) max_b = std::max(max_b, b);
  std::vector<double> t(max_b + 1, 0.0);
  const int32_t V = target.config().vocab_size;
  std::vector<int32_t> toks(size_t(context + max_b));  // the context, then the block's tokens
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = text && !text->empty() ? (*text)[i % text->size()] : int32_t((i * 7919 + 13) % V);
  KvPool& kv = target.kv();
  DFL_CHECK(context + max_b <= kv.max_context(), "verify curve: context too small");
  ForwardArgs fa;
  ForwardOut fo;
  fa.seq = seq;
  fa.aux = aux;
  kv.clear(seq);
  if (context > 0) {
    fa.tokens = toks.data();
    fa.n = context;
    fa.pos0 = 0;
    fa.logits = LogitsMode::kNone;
    target.forward(fa, fo);
  }
  for (int32_t b : blocks) {
    DFL_CHECK(b >= 1 && b <= kv.slack(), "verify curve: block ", b,
              " exceeds LoadOptions.max_block ", kv.slack());
    std::vector<double> s;
    for (int32_t r = 0; r < repeats + kWarm; ++r) {
      fa.tokens = toks.data() + context;
      fa.n = b;
      fa.pos0 = context;
      fa.logits = LogitsMode::kAll;
      fa.argmax_only = argmax_only;
      const auto t0 = Clock::now();
      target.forward(fa, fo);
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      kv.truncate(seq, context);
      if (r >= kWarm || repeats == 0) s.push_back(dt);
    }
    std::sort(s.begin(), s.end());
    t[b] = s[s.size() / 2];
  }
  kv.clear(seq);
  return t;
}

std::vector<double> measure_draft_curve(Proposer& proposer, int32_t hidden, int32_t block,
                                        const std::vector<int32_t>& n_seqs, int32_t repeats) {
  using Clock = std::chrono::steady_clock;
  int32_t max_n = 0;
  for (int32_t n : n_seqs) max_n = std::max(max_n, n);
  std::vector<double> t(size_t(max_n) * block + 1, 0.0);
  const size_t row = proposer.target_aux().size() * size_t(hidden);
  std::vector<float> taps(row, 0.01f);
  std::vector<Draft> drafts(static_cast<size_t>(max_n));
  std::vector<std::vector<int32_t>> toks(static_cast<size_t>(max_n), std::vector<int32_t>{1, 2});
  SamplingParams greedy;
  Rng rng(1);
  for (int32_t n : n_seqs) {
    std::vector<double> s;
    for (int32_t r = 0; r < repeats + kWarm; ++r) {
      std::vector<ProposeJob> jobs(static_cast<size_t>(n));
      for (int32_t i = 0; i < n; ++i) {
        proposer.reset(i);
        ProposeJob& j = jobs[size_t(i)];
        j.seq = i;
        j.taps = taps.data();
        j.n_ctx = 1;
        j.ctx_pos0 = 0;
        j.anchor = 2;
        j.anchor_pos = 1;
        j.n_draft = block - 1;
        j.tokens = &toks[size_t(i)];
        j.params = &greedy;
        j.rng = &rng;
        j.out = &drafts[size_t(i)];
      }
      const auto t0 = Clock::now();
      proposer.propose_batch(jobs);
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r >= kWarm || repeats == 0) s.push_back(dt);
    }
    std::sort(s.begin(), s.end());
    t[size_t(n) * block] = s[s.size() / 2];
  }
  for (int32_t i = 0; i < max_n; ++i) proposer.reset(i);
  return t;
}

}  // namespace dfl
