#include "spec/ngram_proposer.h"

#include "core/error.h"

namespace dfl {

NgramProposer::NgramProposer(int32_t n, int32_t max_draft, int64_t vocab)
    : n_(n), max_draft_(max_draft), vocab_(vocab) {
  DFL_CHECK(n >= 1 && n <= 64, "ngram: N must be in [1, 64], got ", n);
  DFL_CHECK(max_draft >= 1 && max_draft <= 255, "ngram: the block must be in [2, 256]");
}

void NgramProposer::lookup(const std::vector<int32_t>& t, int32_t n, int32_t n_draft,
                           std::vector<int32_t>& out) {
  out.clear();
  const int64_t L = int64_t(t.size());
  if (L <= n || n_draft <= 0) return;
  const int32_t* suffix = t.data() + (L - n);
  // Most recent earlier occurrence: start positions s with t[s, s + n) == suffix, s + n < L.
  for (int64_t s = L - n - 1; s >= 0; --s) {
    bool match = true;
    for (int32_t k = 0; k < n && match; ++k) match = t[size_t(s + k)] == suffix[k];
    if (!match) continue;
    for (int64_t j = s + n; j < L && int32_t(out.size()) < n_draft; ++j) out.push_back(t[size_t(j)]);
    return;
  }
}

void NgramProposer::propose(int32_t, int32_t, int32_t, int32_t, const SamplingParams&, Rng&,
                            Draft&) {
  DFL_ASSERT(false && "NgramProposer drafts from the committed tokens: use propose_batch");
}

void NgramProposer::propose_batch(const std::vector<ProposeJob>& jobs) {
  for (const ProposeJob& j : jobs) {
    if (!j.n_draft || !j.out) continue;
    Draft& d = *j.out;
    DFL_ASSERT(j.tokens);
    lookup(*j.tokens, n_, j.n_draft, d.tokens);
    d.probs.clear();
    if (!j.params->greedy() && !d.tokens.empty()) {
      d.probs.assign(d.tokens.size() * size_t(vocab_), 0.0f);
      for (size_t k = 0; k < d.tokens.size(); ++k) d.probs[k * size_t(vocab_) + size_t(d.tokens[k])] = 1.0f;
    }
  }
}

}  // namespace dfl
