// Helpers for running the tiny fixture models in tests.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/threadpool.h"
#include "model/model.h"

namespace dfl::test {

// A 2-thread pool that sleeps at once when idle (the test machines are shared and small).
// $DFL_TEST_THREADS overrides the thread count.
inline std::unique_ptr<ThreadPool> make_pool(int n = 2) {
  if (const char* e = std::getenv("DFL_TEST_THREADS")) n = std::max(1, std::atoi(e));
  auto p = std::make_unique<ThreadPool>(n);
  p->set_spin(0);
  return p;
}

// The real Gemma-3-270M Q4_K_M (tools/models/gemma3_270m.sh caches it; $DFLASH_CACHE moves the
// cache) and the drafter trained for it that the repo ships.
inline std::string real_gemma3_path() {
  const char* c = std::getenv("DFLASH_CACHE");
  const char* home = std::getenv("HOME");
  return (c && *c ? std::string(c) : std::string(home ? home : "") + "/.cache/dflash") +
         "/gemma-3-270m-q4_k_m.gguf";
}

// One forward over `tokens` at pos0 = current cache length, with optional aux capture.
inline ForwardOut run_forward(CausalLM& m, const std::vector<int32_t>& tokens, LogitsMode mode,
                              const std::vector<int32_t>* aux = nullptr, int32_t seq = 0) {
  ForwardArgs a;
  a.seq = seq;
  a.tokens = tokens.data();
  a.n = static_cast<int32_t>(tokens.size());
  a.pos0 = m.kv().length(seq);
  a.logits = mode;
  a.aux = aux;
  ForwardOut out;
  m.forward(a, out);
  return out;
}

// Indices 0..n-1.
inline std::vector<int32_t> iota_ids(int32_t n, int32_t first = 0) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

}  // namespace dfl::test
