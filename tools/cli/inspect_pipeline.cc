#include "inspect_pipeline.h"

#include <cstdio>

#include "core/error.h"
#include "dist/stage_split.h"
#include "kv/kv_pool.h"
#include "model/decoder.h"

namespace dfl::cli {

namespace {

// Bytes of the per-step command the driver sends each worker (dist/stage_protocol.h): header,
// counts, one segment, the aux list and the segment's tokens.
int64_t command_bytes(int32_t rows, size_t n_aux) { return 4 * (2 + 4 + 5 + int64_t(n_aux) + rows); }

}  // namespace

nlohmann::ordered_json pipeline_plan(const ModelConfig& c, const PipelineInspect& p) {
  DFL_CHECK(p.n_stages >= 1 && p.n_stages <= c.n_layers, "--pipeline-parallel must be in [1, ",
            c.n_layers, "] for ", c.n_layers, " layers");
  WeightBytes w;
  std::string source = "checkpoint";
  try {
    const auto ck = open_checkpoint(c);
    w = weight_bytes_of(*ck, c);
  } catch (const Error&) {
    w = estimate_weight_bytes(c);
    source = "estimated from config.json";
  }
  const std::vector<StageRange> st = p.layer_counts.empty()
                                         ? split_by_bytes(w, p.n_stages)
                                         : split_from_counts(p.layer_counts, c.n_layers, p.n_stages);
  std::vector<int32_t> aux;
  int32_t block = 1;
  if (p.draft) {
    for (int32_t t : p.draft->dflash->target_layer_ids) aux.push_back(t + 1);  // the "+1" rule (model.h)
    block = p.draft->dflash->block_size;
  }
  const int32_t H = c.hidden_size;
  nlohmann::ordered_json j;
  j["stages"] = p.n_stages;
  j["split"] = p.layer_counts.empty() ? "by weight bytes" : "--pp-layers " + p.layer_counts;
  j["weights_source"] = source;
  j["weights_total_bytes"] = w.total();
  j["activation_dtype"] = "f32";
  j["draft_aux_indices"] = aux;
  j["draft_block"] = block;
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  int64_t row_target = 0, row_spec = 0;
  for (int32_t s = 0; s < p.n_stages; ++s) {
    nlohmann::ordered_json r;
    r["rank"] = s;
    r["layers"] = {st[size_t(s)].begin, st[size_t(s)].end - 1};
    r["holds"] = s == 0 && s + 1 == p.n_stages ? "embedding, layers, final norm, lm_head, drafter, engine"
                 : s == 0                      ? "embedding, layers"
                 : s + 1 == p.n_stages         ? "layers, embedding (drafter), final norm, lm_head, drafter, engine"
                                               : "layers";
    r["weight_bytes"] = stage_weight_bytes(w, st, s);
    r["kv_bytes_per_sequence"] = kv_bytes_per_sequence(kv_layout(c, st[size_t(s)].begin, st[size_t(s)].end),
                                                       p.context, p.slack);
    if (s + 1 < p.n_stages) {
      const int64_t bt = boundary_bytes_per_row(st, s, H, aux, false);
      const int64_t bs = boundary_bytes_per_row(st, s, H, aux, true);
      r["sends_per_target_row"] = bt;
      r["sends_per_verify_row"] = bs;
      row_target += bt;
      row_spec += bs;
    }
    ranks.push_back(r);
  }
  j["ranks"] = ranks;
  const int64_t cmd1 = command_bytes(1, 0), cmdB = command_bytes(block, aux.size());
  nlohmann::ordered_json t;
  // Target-only decode: one row per sequence and step.
  t["target_only_bytes_per_token"] = row_target + int64_t(p.n_stages - 1) * cmd1;
  // DFlash: a verify step of `block` rows (with taps) commits τ tokens, 1 ≤ τ ≤ block.
  t["dflash_bytes_per_verify_step"] = row_spec * block + int64_t(p.n_stages - 1) * cmdB;
  t["dflash_bytes_per_token_at_tau_1"] = t["dflash_bytes_per_verify_step"];
  t["dflash_bytes_per_token_at_tau_half_block"] =
      t["dflash_bytes_per_verify_step"].get<int64_t>() / std::max(1, block / 2);
  j["traffic"] = t;
  j["kv_context"] = p.context;
  return j;
}

void print_pipeline_plan(const nlohmann::ordered_json& j) {
  const double GB = 1e9;
  std::printf("\nPipeline parallel: %d stages, split %s (weights %s: %.2f GB in all), activations %s\n",
              j["stages"].get<int>(), j["split"].get<std::string>().c_str(),
              j["weights_source"].get<std::string>().c_str(), j["weights_total_bytes"].get<double>() / GB,
              j["activation_dtype"].get<std::string>().c_str());
  std::printf("rank  layers     weights GB  KV GB/seq @%lld  sends/row (target | verify)  holds\n",
              (long long)j["kv_context"].get<int64_t>());
  for (const auto& r : j["ranks"]) {
    char sends[64] = "-";
    if (r.contains("sends_per_target_row"))
      std::snprintf(sends, sizeof sends, "%lld | %lld B", (long long)r["sends_per_target_row"].get<int64_t>(),
                    (long long)r["sends_per_verify_row"].get<int64_t>());
    std::printf("%4d  %3d-%-5d  %10.2f  %14.3f  %-27s  %s\n", r["rank"].get<int>(), r["layers"][0].get<int>(),
                r["layers"][1].get<int>(), r["weight_bytes"].get<double>() / GB,
                r["kv_bytes_per_sequence"].get<double>() / GB, sends, r["holds"].get<std::string>().c_str());
  }
  const auto& t = j["traffic"];
  std::printf("traffic: target-only decode %lld B per token (activations + the step command)\n",
              (long long)t["target_only_bytes_per_token"].get<int64_t>());
  if (!j["draft_aux_indices"].empty())
    std::printf("traffic: DFlash block %d, taps %s: %lld B per verify step (= per token at tau 1), "
                "%lld B per token at tau = block/2\n", j["draft_block"].get<int>(),
                j["draft_aux_indices"].dump().c_str(), (long long)t["dflash_bytes_per_verify_step"].get<int64_t>(),
                (long long)t["dflash_bytes_per_token_at_tau_half_block"].get<int64_t>());
}

}  // namespace dfl::cli
