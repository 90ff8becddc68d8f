// Shared check of a target family against its transformers goldens (docs/FIXTURES.md).
//
// Tolerances: `embed` is a row copy of the fp32 table (times the family's embedding scale) →
// ≤ 1e-6. `layer_out` / `logits` / the greedy-step logits: max |ours − HF| ≤ 1e-4 absolute
// (values are O(1–10); HF computes in fp32 with a different summation order, so we expect
// ~1e-6..1e-5). `greedy_ids` exact.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/golden.h"
#include "common/models.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace dfl::test {

constexpr double kGoldenTol = 1e-4;

// A target checkpoint against its transformers golden (golden.safetensors: prompt_ids, embed,
// layer_out, logits, greedy_ids, greedy_logits): the prompt forward with every tap, then 32
// greedy steps one token at a time with the KV cache. `tag` names the fixture in the output.
// `model_path`: a folder or a .gguf file; `golden_path`: its golden.safetensors.
inline void expect_matches_golden(const std::string& model_path, const std::string& golden_path,
                                  const std::string& tag) {
  Golden g(golden_path);
  auto pool = make_pool();
  auto model = load_causal_lm(model_path, LoadOptions{}, *pool);
  const ModelConfig& c = model->config();
  const int32_t L = c.n_layers, H = c.hidden_size, V = c.vocab_size;
  const auto prompt = g.i32("prompt_ids");
  const int32_t n = static_cast<int32_t>(prompt.size());
  ASSERT_EQ(g.shape("layer_out"), (std::vector<int64_t>{L, n, H}));

  const auto aux = iota_ids(L + 1);
  ForwardOut out = run_forward(*model, prompt, LogitsMode::kAll, &aux);
  ASSERT_EQ(out.logits.size(), size_t(n) * V);
  ASSERT_EQ(out.aux.size(), size_t(n) * (L + 1) * H);
  EXPECT_EQ(model->kv().length(0), n);

  // Split the [n, (L+1)·H] aux block into per-index [n, H] matrices.
  auto aux_col = [&](int32_t j) {
    std::vector<float> m(size_t(n) * H);
    for (int32_t t = 0; t < n; ++t)
      std::copy_n(out.aux.data() + (size_t(t) * (L + 1) + j) * H, H, m.data() + size_t(t) * H);
    return m;
  };
  const double e_embed = max_abs_diff(aux_col(0), g.f32("embed"));
  EXPECT_LE(e_embed, 1e-6) << "embedding rows (× the family's scale) must match";
  const auto layer_out = g.f32("layer_out");
  double e_layers = 0.0;
  for (int32_t il = 0; il < L; ++il) {
    const auto ours = aux_col(il + 1);
    const double e = max_abs_diff(ours.data(), layer_out.data() + size_t(il) * n * H, ours.size());
    EXPECT_LE(e, kGoldenTol) << "layer_out[" << il << "]";
    e_layers = std::max(e_layers, e);
  }
  const double e_logits = max_abs_diff(out.logits, g.f32("logits"));
  EXPECT_LE(e_logits, kGoldenTol);
  std::printf("[%s] prompt n=%d: max|Δembed|=%.3g max|Δlayer_out|=%.3g max|Δlogits|=%.3g "
              "(|logits|max=%.3g, tol %.0e)\n",
              tag.c_str(), n, e_embed, e_layers, e_logits, max_abs(out.logits), kGoldenTol);

  // Greedy decode 32 tokens one at a time with the KV cache.
  const auto greedy = g.i32("greedy_ids");
  const auto greedy_logits = g.f32("greedy_logits");
  std::vector<int32_t> ours;
  double e_steps = max_abs_diff(out.logits.data() + size_t(n - 1) * V, greedy_logits.data(), V);
  int32_t tok = static_cast<int32_t>(ops::argmax(out.logits.data() + size_t(n - 1) * V, V));
  ours.push_back(tok);
  for (size_t i = 1; i < greedy.size(); ++i) {
    ForwardOut step = run_forward(*model, {tok}, LogitsMode::kLast);
    ASSERT_EQ(step.logits.size(), size_t(V));
    e_steps = std::max(e_steps, max_abs_diff(step.logits.data(), greedy_logits.data() + i * V, V));
    tok = static_cast<int32_t>(ops::argmax(step.logits.data(), V));
    ours.push_back(tok);
  }
  EXPECT_EQ(ours, greedy);
  EXPECT_LE(e_steps, kGoldenTol);
  EXPECT_EQ(model->kv().length(0), n + int32_t(greedy.size()) - 1);
  std::printf("[%s] greedy 32: ids %s, max|Δstep logits|=%.3g\n", tag.c_str(),
              ours == greedy ? "identical" : "DIFFER", e_steps);
}

inline void expect_matches_golden(const std::string& dir, const std::string& tag) {
  expect_matches_golden(dir, dir + "/golden.safetensors", tag);
}

}  // namespace dfl::test
