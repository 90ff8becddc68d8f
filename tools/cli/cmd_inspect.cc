#include <cstdio>
#include <iomanip>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "run_common.h"
#include "commands.h"
#include "inspect_pipeline.h"
#include "core/error.h"
#include "core/mmap.h"
#include "model/config.h"
#include "kv/recurrent_state.h"
#include "model/dflash_draft.h"
#include "model/gdn.h"
#include "model/model.h"

namespace dfl::cli {

namespace {
const std::vector<FlagSpec> kFlags = {
    {"--json", "", "print one JSON object"},
    {"--context", "N", "context length for the KV-memory figures (default 4096)"},
    {"--block-size", "B", "speculative block size: the rollback slack of sliding rings (default 16)"},
    {"--kv-dtype", "T", "KV element type the bytes are counted in: bf16 (default, as dflash run) | f32"},
    {"--pipeline-parallel", "N", "also print the N-stage pipeline split: layers, weight and KV bytes per "
                                 "rank, bytes per token across the stage boundaries"},
    {"--pp-layers", "A,B,...", "with --pipeline-parallel: layers per stage (default: split by weight bytes)"},
    {"--draft", "DIR", "with --pipeline-parallel: the DFlash drafter whose taps ride the relay"},
    {"--target", "DIR", "a drafter's target: each tap's target layer kind (sliding / full)"},
    {"--help", "", "show this help"},
};

nlohmann::ordered_json describe(const ModelConfig& c, int64_t context, int32_t slack, KvDtype dt) {
  nlohmann::ordered_json j;
  j["architecture"] = c.architecture;
  j["family"] = family_name(c.family);
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_layers"] = c.n_layers;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (int il = 0; il < c.n_layers; ++il) {
    const LayerSpec& l = c.layers[il];
    nlohmann::ordered_json e;
    e["index"] = il;
    e["mixer"] = l.mixer == MixerKind::kGatedDeltaNet ? "gated_deltanet" : "attention";
    e["attention"] = l.mixer == MixerKind::kGatedDeltaNet ? "none" : attn_kind_name(l.attn);
    e["output_gate"] = l.out_gate;
    e["window"] = {l.window.left, l.window.right};
    // Both derived from the one resolved window (never stored twice).
    e["causal"] = l.window.right == 0;
    e["sinks"] = l.sinks;
    e["sliding_window"] = l.attn == AttnKind::kSliding ? l.window.left + 1 : 0;  // keys incl. the query
    e["num_heads"] = l.n_heads;
    e["num_kv_heads"] = l.n_kv_heads;
    e["head_dim"] = l.head_dim;
    e["v_head_dim"] = l.v_head_dim;
    e["rope_theta"] = l.rope.theta;
    // Dims that really rotate: proportional RoPE (Gemma 4) spans the head but turns 2·n_angles.
    e["rotary_dims"] = l.rope.type == "proportional" ? 2 * l.rope.n_angles : l.rope.n_rot;
    e["rope_type"] = l.rope.type;
    e["v_from_k"] = l.v_from_k;
    e["moe"] = l.moe;
    layers.push_back(e);
  }
  j["layers"] = layers;
  if (c.dflash) {
    const DFlashSpec& d = *c.dflash;
    nlohmann::ordered_json dj;
    dj["block_size"] = d.block_size;
    dj["mask_token_id"] = d.mask_token_id;
    dj["target_layer_ids"] = d.target_layer_ids;
    dj["target_aux_layers"] = nlohmann::json::array();
    for (int32_t t : d.target_layer_ids) dj["target_aux_layers"].push_back(t + 1);
    dj["dialect"] = d.dialect;
    // The tap table: each tap is the residual stream after target layer t = aux index t + 1.
    nlohmann::ordered_json taps = nlohmann::ordered_json::array();
    for (size_t i = 0; i < d.target_layer_ids.size(); ++i)
      taps.push_back({{"tap", i}, {"target_layer", d.target_layer_ids[i]},
                      {"aux_index", d.target_layer_ids[i] + 1}});
    dj["taps"] = taps;
    if (!d.speculators_type.empty()) dj["speculators_model_type"] = d.speculators_type;
    if (!d.verifier.empty()) dj["verifier"] = d.verifier;
    dj["draft_vocab_size"] = d.draft_vocab_size;
    dj["reduced_vocab"] = d.reduced_vocab(c.vocab_size);
    dj["sample_from_anchor"] = d.sample_from_anchor;
    dj["causal"] = d.causal ? nlohmann::ordered_json(*d.causal) : nlohmann::ordered_json(nullptr);
    const std::string me = mask_embedding_file(c.dir);
    dj["mask_embedding"] = me.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(me);
    dj["attention_value_scale"] = d.attention_value_scale;
    dj["backbone_rotary_base"] = d.backbone_rotary_base ? nlohmann::ordered_json(*d.backbone_rotary_base)
                                                        : nlohmann::ordered_json(nullptr);
    if (d.v2) {  // DFlash2 (model/dflash2_draft.h)
      const DFlash2Spec& v = *d.v2;
      nlohmann::ordered_json v2;
      v2["conv_kernel_size"] = v.conv_kernel_size;
      v2["conv_group_size"] = v.conv_group_size;
      v2["conv_groups"] = v.has_conv() ? c.hidden_size / v.conv_group_size : 0;
      v2["selector_rank"] = v.selector_rank;
      v2["selector_top_k"] = v.selector_top_k;
      v2["output_multiplier"] = v.output_multiplier;
      v2["final_logit_softcapping"] = v.final_logit_softcap > 0 ? nlohmann::ordered_json(v.final_logit_softcap)
                                                                 : nlohmann::ordered_json(nullptr);
      // Per-layer conv weights and the two [V, r] codebooks the selector reads rows of.
      v2["conv_params_per_layer"] = v.has_conv() ? 2 * (2 * int64_t(v.conv_kernel_size) * c.hidden_size +
                                                        2 * int64_t(v.conv_kernel_size) *
                                                            (c.hidden_size / v.conv_group_size) * c.hidden_size)
                                                 : 0;
      v2["selector_params"] = v.has_selector() ? int64_t(v.selector_rank) * (c.hidden_size + 2 * int64_t(c.vocab_size)) : 0;
      dj["dflash2"] = v2;
    } else {
      dj["dflash2"] = nullptr;
    }
    j["dflash"] = dj;
  } else {
    j["dflash"] = nullptr;
  }
  if (c.mimo) {
    const MiMoSpec& m = *c.mimo;
    nlohmann::ordered_json mj;
    mj["qkv_layout"] = m.fused_qkv ? "fused_qkv" : "split";
    mj["ckpt_tp"] = m.ckpt_tp;
    mj["attention_value_scale"] = m.attention_value_scale;
    mj["sliding_window"] = m.sliding_window;
    mj["window_edge"] = m.window_edge == WindowEdge::kInclusiveW ? "W keys incl. query (HF/vLLM)"
                                                                 : "W+1 keys (SGLang)";
    mj["fp8"] = m.fp8;
    mj["fp8_block"] = {m.fp8_block_out, m.fp8_block_in};
    j["mimo"] = mj;
  }
  if (c.moe) {
    const MoESpec& e = *c.moe;
    nlohmann::ordered_json ej;
    ej["n_routed_experts"] = e.n_routed_experts;
    ej["num_experts_per_tok"] = e.n_experts_per_tok;
    ej["moe_intermediate_size"] = e.moe_intermediate_size;
    ej["scoring_func"] = e.scoring_func;
    ej["topk_method"] = e.topk_method;
    ej["n_group"] = e.n_group;
    ej["topk_group"] = e.topk_group;
    ej["norm_topk_prob"] = e.norm_topk_prob;
    ej["routed_scaling_factor"] = e.routed_scaling_factor;
    ej["shared_expert_intermediate_size"] = e.shared_intermediate_size;
    j["moe"] = ej;
  }
  if (c.gdn) {
    const GdnSpec& g = *c.gdn;
    const RecurrentSpec rs = recurrent_spec(c);
    nlohmann::ordered_json rj;
    rj["linear_layers"] = rs.n_layers;
    rj["full_attention_layers"] = c.n_layers - rs.n_layers;
    rj["linear_key_heads"] = g.n_k_heads;
    rj["linear_value_heads"] = g.n_v_heads;
    rj["key_head_dim"] = g.d_k;
    rj["value_head_dim"] = g.d_v;
    rj["conv_kernel"] = g.conv_kernel;
    rj["conv_dim"] = g.conv_dim();
    rj["dtype"] = "f32";
    // The committed state of one sequence (conv [conv_dim, K-1] + S [Hv, dk, dv] per layer).
    rj["state_bytes_per_sequence"] = recurrent_state_bytes(rs);
    // What the engine holds per slot for exact rollback of a block of `slack`: two state
    // buffers + the replay rows (kv/recurrent_state.h) — vs per-position snapshots.
    rj["rollback"] = "double buffer + replay of the accepted rows";
    rj["rollback_block"] = slack;
    rj["engine_bytes_per_sequence"] = recurrent_bytes_per_sequence(rs, slack);
    rj["snapshot_alternative_bytes_per_sequence"] = (int64_t(slack) + 1) * recurrent_state_bytes(rs);
    j["recurrent_state"] = rj;
  }
  const auto layout = kv_layout(c);
  std::vector<KvLayerSpec> full, sliding;
  for (const auto& l : layout) (l.window ? sliding : full).push_back(l);
  nlohmann::ordered_json kv;
  // Counted in the element type the engine would store (--kv-dtype; bf16 rings round their
  // capacity up to 16 slots, kv/kv_pool.h).
  kv["dtype"] = kv_dtype_name(dt);
  kv["context"] = context;
  kv["block_slack"] = slack;
  kv["bytes_per_sequence"] = kv_bytes_per_sequence(layout, context, slack, dt);
  kv["full_layers_bytes_per_token"] = kv_bytes_per_sequence(full, 1, slack, dt);
  kv["sliding_layers_fixed_bytes"] = kv_bytes_per_sequence(sliding, 1ll << 40, slack, dt);
  // The same layout at 2 bytes per element, unrounded (the figures of TARGETS-SPEC §3.5/§7).
  kv["bf16_bytes_per_sequence"] = kv_bytes_per_sequence(layout, context, slack) / 2;
  kv["bf16_full_layers_bytes_per_token"] = kv_bytes_per_sequence(full, 1, slack) / 2;
  kv["bf16_sliding_bytes_per_slot"] = kv_bytes_per_sequence(sliding, 1, slack) / 2;
  kv["sliding_ring_slots"] = sliding.empty() ? 0 : int64_t(sliding[0].window) + slack;
  j["kv_cache"] = kv;
  return j;
}
}  // namespace

int cmd_inspect(int argc, char** argv) {
  Args args(kFlags, argc, argv, 2);
  if (args.has("--help")) {
    std::cout << usage("dflash inspect DIR [--json] [--context N] [--target DIR]", kFlags);
    return 0;
  }
  DFL_CHECK(args.positional().size() == 1, "inspect takes exactly one model folder");
  const int64_t context = args.integer("--context", 4096);
  DFL_CHECK(context > 0, "--context must be positive");
  const int64_t slack = args.integer("--block-size", 16);
  DFL_CHECK(slack > 0 && slack <= 256, "--block-size must be in [1, 256]");
  const ModelConfig c = load_model_config(args.positional()[0]);
  const KvDtype kv_dt = parse_kv_dtype(args);
  auto j = describe(c, context, static_cast<int32_t>(slack), kv_dt);
  if (args.has("--pipeline-parallel")) {
    PipelineInspect pi;
    pi.n_stages = int32_t(args.integer("--pipeline-parallel", 2));
    pi.layer_counts = args.str("--pp-layers");
    if (args.has("--draft")) pi.draft = load_model_config(args.str("--draft"));
    DFL_CHECK(!pi.draft || pi.draft->dflash, "--draft: '", args.str("--draft"), "' is not a DFlash drafter");
    pi.context = context;
    pi.slack = int32_t(slack);
    j["pipeline"] = pipeline_plan(c, pi);
  }
  if (args.has("--target")) {
    DFL_CHECK(c.dflash, "--target is for a drafter; '", args.positional()[0], "' is a target");
    const ModelConfig t = load_model_config(args.str("--target"));
    DFL_CHECK(t.hidden_size == c.hidden_size, "drafter hidden_size ", c.hidden_size,
              " does not match the target's ", t.hidden_size);
    int n_full = 0;
    for (auto& tap : j["dflash"]["taps"]) {
      const int32_t tl = tap["target_layer"].get<int32_t>();
      DFL_CHECK(tl >= 0 && tl < t.n_layers, "tap names target layer ", tl, " but the target has ",
                t.n_layers, " layers");
      const LayerSpec& l = t.layers[tl];
      tap["target_layer_kind"] = l.mixer == MixerKind::kGatedDeltaNet ? "gated_deltanet"
                                                                     : attn_kind_name(l.attn);
      n_full += l.mixer == MixerKind::kAttention && l.attn == AttnKind::kFull;
    }
    j["dflash"]["target"] = t.dir;
    j["dflash"]["taps_on_full_attention_layers"] = n_full;
  }
  if (args.has("--json")) {
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << c.architecture << " (" << family_name(c.family) << "): hidden " << c.hidden_size
            << ", " << c.n_layers << " layers, vocab " << c.vocab_size << ", intermediate "
            << c.intermediate_size << (c.tie_word_embeddings ? ", tied embeddings" : "") << "\n";
  if (c.dflash) {
    const auto& d = j["dflash"];
    std::cout << "DFlash drafter: block_size " << d["block_size"] << ", mask_token_id "
              << d["mask_token_id"] << ", target_layer_ids " << d["target_layer_ids"].dump()
              << " (aux " << d["target_aux_layers"].dump() << "), mask_embedding "
              << d["mask_embedding"].dump() << ", dialect " << d["dialect"].get<std::string>()
              << "\n";
    if (c.dflash->reduced_vocab(c.vocab_size))
      std::cout << "  draft vocab " << c.dflash->draft_vocab_size << " of " << c.vocab_size
                << " (own lm_head, d2t map to target ids)\n";
    else
      std::cout << "  draft vocab = target vocab " << c.vocab_size << " (target's lm_head)\n";
    for (const auto& t : d["taps"])
      std::cout << "  tap " << t["tap"] << ": target layer " << t["target_layer"]
                << (t.contains("target_layer_kind")
                        ? " (" + t["target_layer_kind"].get<std::string>() + ")"
                        : std::string())
                << " -> aux " << t["aux_index"] << "\n";
    if (d.contains("taps_on_full_attention_layers"))
      std::cout << "  " << d["taps_on_full_attention_layers"] << " of " << d["taps"].size()
                << " taps on full-attention target layers\n";
  }
  if (c.dflash && !j["dflash"]["dflash2"].is_null()) {  // DFlash2 (model/dflash2_draft.h)
    const auto& v = j["dflash"]["dflash2"];
    std::cout << "DFlash2: grouped dynamic causal conv around attention and MLP (kernel "
              << v["conv_kernel_size"] << ", group " << v["conv_group_size"] << " -> " << v["conv_groups"]
              << " groups, " << v["conv_params_per_layer"] << " params/layer), candidate selector (rank "
              << v["selector_rank"] << ", top_k " << v["selector_top_k"] << ", " << v["selector_params"]
              << " params), unary x " << v["output_multiplier"] << ", softcap "
              << v["final_logit_softcapping"].dump() << "\n";
  }
  std::cout << "\nlayer  mixer           attention  window        causal  sinks  heads/kv  head_dim/v  rope_theta  rot\n";
  for (const auto& l : j["layers"]) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%5d  %-14s  %-9s  (%5d,%5d)  %-6s  %-5s  %3d/%-4d  %4d/%-5d  %10.0f  %3d\n",
                  l["index"].get<int>(), l["mixer"].get<std::string>().c_str(),
                  l["attention"].get<std::string>().c_str(),
                  l["window"][0].get<int>(), l["window"][1].get<int>(),
                  l["causal"].get<bool>() ? "yes" : "no", l["sinks"].get<bool>() ? "yes" : "no",
                  l["num_heads"].get<int>(), l["num_kv_heads"].get<int>(), l["head_dim"].get<int>(),
                  l["v_head_dim"].get<int>(), l["rope_theta"].get<double>(), l["rotary_dims"].get<int>());
    std::cout << buf;
  }
  std::vector<int> kv_shared;
  for (const auto& l : j["layers"])
    if (l["v_from_k"].get<bool>()) kv_shared.push_back(l["index"].get<int>());
  if (!kv_shared.empty())
    std::cout << "V = raw K projection (attention_k_eq_v, no v_proj; both cached) in layers "
              << nlohmann::json(kv_shared).dump() << "\n";
  const auto& kv = j["kv_cache"];
  std::cout << "\nKV cache (" << kv["dtype"].get<std::string>() << ") at context " << context
            << ": " << kv["bytes_per_sequence"] << " bytes per sequence ("
            << kv["full_layers_bytes_per_token"] << " B/token in full layers + "
            << kv["sliding_layers_fixed_bytes"] << " B fixed in sliding rings)\n";
  std::cout << "  as bf16: " << kv["bf16_bytes_per_sequence"] << " bytes ("
            << kv["bf16_full_layers_bytes_per_token"] << " B/token in full layers + "
            << kv["bf16_sliding_bytes_per_slot"] << " B per ring slot x " << kv["sliding_ring_slots"]
            << " slots)\n";
  if (j.contains("recurrent_state")) {
    const auto& r = j["recurrent_state"];
    std::cout << "Recurrent state (Gated DeltaNet, f32): " << r["linear_layers"] << " linear + "
              << r["full_attention_layers"] << " full layers; " << r["state_bytes_per_sequence"]
              << " bytes per sequence; engine (2 buffers + replay rows, block " << slack << "): "
              << r["engine_bytes_per_sequence"] << " bytes per sequence (per-position snapshots "
              << "would need " << r["snapshot_alternative_bytes_per_sequence"] << ")\n";
  }
  if (j.contains("moe") && !j.contains("mimo")) std::cout << "MoE: " << j["moe"].dump() << "\n";
  if (j.contains("mimo")) std::cout << "MiMo: " << j["mimo"].dump() << "\nMoE: " << j["moe"].dump() << "\n";
  if (j.contains("pipeline")) {
    std::cout.flush();
    print_pipeline_plan(j["pipeline"]);
  }
  return 0;
}

}  // namespace dfl::cli
