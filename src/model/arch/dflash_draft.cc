#include "model/dflash_draft.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/mmap.h"
#include "io/torch_pickle.h"
#include "model/config_json.h"
#include "model/decoder.h"
#include "model/dflash2_draft.h"
#include "model/family.h"
#include "model/gguf_dialect.h"
#include "model/weights.h"

namespace dfl {

namespace {

using namespace cfg;

bool is_speculators(const json& root) {
  if (find_key(root, "speculators_model_type")) return true;
  const json* a = find_key(root, "architectures");
  if (!a || !a->is_array() || a->empty() || !(*a)[0].is_string()) return false;
  const std::string s = (*a)[0].get<std::string>();
  return s == "DFlashSpeculator" || s == "DFlash2Speculator";
}

// The speculators dialect (vllm-project/speculators 0.9 `DFlashSpeculatorConfig`, the reference):
// the geometry is transformer_layer_config, saved with to_diff_dict() — keys equal to the
// Qwen3Config defaults are absent and are filled in here; target layer ids = aux − 1;
// mask_token_id / block_size (default 8) / draft_vocab_size (default 32000) at the top level.
// Causality as the reference's mask: full-attention layers are always bidirectional, sliding
// layers causal unless sliding_window_non_causal (default false). (vLLM's update_dflash instead
// maps causal = !sliding_window_non_causal onto every layer and reads an absent key as true.)
json speculators_to_zlab(const json& root, DFlashSpec& d) {
  const json* tl = find_key(root, "transformer_layer_config");
  DFL_CHECK(tl && tl->is_object(), "config: a speculators drafter needs transformer_layer_config");
  const std::string mt = opt_str(*tl, "model_type").value_or("qwen3");
  DFL_CHECK(mt == "qwen3", "config: speculators transformer_layer_config model_type '", mt,
            "' is not supported (qwen3)");
  json eff = {{"vocab_size", 151936}, {"hidden_size", 4096}, {"intermediate_size", 22016},
              {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 32},
              {"head_dim", 128}, {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6},
              {"tie_word_embeddings", false}, {"hidden_act", "silu"}, {"rope_theta", 10000.0}};
  for (auto it = tl->begin(); it != tl->end(); ++it) eff[it.key()] = it.value();
  json dc = json::object();
  if (const json* m = find_key(root, "mask_token_id")) dc["mask_token_id"] = *m;
  eff["block_size"] = opt_int(root, "block_size").value_or(8);
  const json* aux = find_key(root, "aux_hidden_state_layer_ids");
  DFL_CHECK(aux && aux->is_array() && !aux->empty(),
            "config: a speculators drafter needs aux_hidden_state_layer_ids");
  json ids = json::array();
  for (const auto& e : *aux) {
    const int64_t a = as_int(e, "aux_hidden_state_layer_ids");
    DFL_CHECK(a >= 1, "config: aux_hidden_state_layer_ids entry ", a,
              " must be >= 1 (aux 0 is the embedding, no DFlash tap)");
    ids.push_back(a - 1);
  }
  dc["target_layer_ids"] = ids;
  // Sliding layers are causal by the resolver's default rule and full layers bidirectional;
  // non-causal sliding layers are everything non-causal.
  // (DFlash2SpeculatorConfig defaults the key to true.)
  const bool dflash2 = opt_str(root, "speculators_model_type").value_or("") == "dflash2";
  if (opt_bool(root, "sliding_window_non_causal").value_or(dflash2)) dc["causal"] = false;
  d.sample_from_anchor = opt_bool(root, "sample_from_anchor").value_or(false);
  d.draft_vocab_size = static_cast<int32_t>(opt_int(root, "draft_vocab_size").value_or(32000));
  d.speculators_type = opt_str(root, "speculators_model_type").value_or("");
  if (const json* sc = find_key(root, "speculators_config"))
    if (const json* v = find_key(*sc, "verifier"))
      d.verifier = opt_str(*v, "name_or_path").value_or(opt_str(*v, "name").value_or(""));
  d.dialect = "speculators";
  eff["dflash_config"] = dc;
  return eff;
}

void parse_dflash(const nlohmann::json& raw, ModelConfig& c, const ConfigOptions& opts) {
  c.family = Family::kDFlashDraft;
  DFlashSpec d;
  const json root = is_speculators(raw) ? speculators_to_zlab(raw, d) : raw;
  parse_common(root, c);
  const LayerSpec proto = base_layer(root, c);
  if (const json* v = dflash_key(root, "block_size")) d.block_size = static_cast<int32_t>(as_int(*v, "block_size"));
  DFL_CHECK(d.block_size >= 2 && d.block_size <= 256, "config: block_size must be in [2, 256], got ",
            d.block_size);
  const json* mid = dflash_key(root, "mask_token_id");
  DFL_CHECK(mid, "config: drafter has no dflash_config.mask_token_id");
  const int64_t mask = as_int(*mid, "mask_token_id");
  DFL_CHECK(mask >= 0 && mask < c.vocab_size, "config: mask_token_id ", mask,
            " is out of range for vocab_size ", c.vocab_size);
  d.mask_token_id = static_cast<int32_t>(mask);
  d.num_target_layers = static_cast<int32_t>(opt_int(root, "num_target_layers").value_or(0));
  if (const json* eg = find_key(root, "eagle_aux_hidden_state_layer_ids");
      eg && d.dialect == "z-lab") {
    // vLLM's first choice: aux-index semantics as-is (aux i = output of layer i - 1).
    DFL_CHECK(eg->is_array() && !eg->empty(),
              "config: eagle_aux_hidden_state_layer_ids must be a non-empty list");
    for (const auto& e : *eg) {
      const int64_t a = as_int(e, "eagle_aux_hidden_state_layer_ids");
      DFL_CHECK(a >= 1 && a < 100000, "config: eagle_aux_hidden_state_layer_ids entry ", a,
                " is out of range (>= 1: aux 0 is the embedding)");
      d.target_layer_ids.push_back(static_cast<int32_t>(a - 1));
    }
    d.has_explicit_target_layer_ids = true;
    d.dialect = "eagle-aux";
  } else if (const json* ids = dflash_key(root, "target_layer_ids")) {
    DFL_CHECK(ids->is_array() && !ids->empty(), "config: target_layer_ids must be a non-empty list");
    for (const auto& e : *ids) {
      const int64_t t = as_int(e, "target_layer_ids");
      DFL_CHECK(t >= 0 && t < 100000, "config: target_layer_ids entry ", t, " is out of range");
      d.target_layer_ids.push_back(static_cast<int32_t>(t));
    }
    d.has_explicit_target_layer_ids = true;
  } else {
    DFL_CHECK(d.num_target_layers > 0,
              "config: drafter has neither target_layer_ids nor num_target_layers");
    d.target_layer_ids = default_target_layer_ids(d.num_target_layers, c.n_layers);
  }
  if (d.dialect != "speculators") {
    // z-lab layout with its own reduced-vocabulary head (dflash_config first, then top level).
    if (const json* v = dflash_key(root, "draft_vocab_size")) {
      const int64_t dv = as_int(*v, "draft_vocab_size");
      DFL_CHECK(dv >= 1 && dv <= c.vocab_size, "config: draft_vocab_size ", dv,
                " must be in [1, vocab_size ", c.vocab_size, "]");
      d.draft_vocab_size = static_cast<int32_t>(dv);
    }
  }
  DFL_CHECK(d.draft_vocab_size >= 0 && d.draft_vocab_size <= c.vocab_size, "config: draft_vocab_size ",
            d.draft_vocab_size, " must be in [1, vocab_size ", c.vocab_size, "]");
  if (const json* v = dflash_key(root, "attention_value_scale")) {
    DFL_CHECK(v->is_number(), "config: attention_value_scale must be a number");
    d.attention_value_scale = v->get<float>();
  }
  if (const json* v = dflash_key(root, "backbone_rotary_base")) {
    DFL_CHECK(v->is_number() && v->get<double>() > 0, "config: backbone_rotary_base must be > 0");
    d.backbone_rotary_base = v->get<float>();
  }

  DraftAttnConfig a;
  if (const json* lt = find_key(root, "layer_types")) {
    DFL_CHECK(lt->is_array(), "config: layer_types must be a list");
    std::vector<std::string> types;
    for (const auto& e : *lt) {
      DFL_CHECK(e.is_string(), "config: layer_types entries must be strings");
      types.push_back(e.get<std::string>());
    }
    a.layer_types = std::move(types);
  }
  const json* dc = find_key(root, "dflash_config");
  if (dc) DFL_CHECK(dc->is_object(), "config: dflash_config must be an object");
  static const json kEmpty = json::object();
  const json& dcfg = dc ? *dc : kEmpty;
  a.use_swa = opt_bool(dcfg, "use_swa").value_or(false);
  // Clamp before narrowing so an absurd value is reported, not wrapped.
  auto window_key = [](std::optional<int64_t> w) -> std::optional<int32_t> {
    if (!w) return std::nullopt;
    return static_cast<int32_t>(std::clamp<int64_t>(*w, -1, int64_t(1) << 30));
  };
  a.swa_window_size = window_key(opt_int(dcfg, "swa_window_size"));
  a.sliding_window = window_key(opt_int(root, "sliding_window"));
  a.is_causal = opt_bool(root, "is_causal");
  a.dflash_causal = opt_bool(dcfg, "causal");
  if (!a.dflash_causal) a.dflash_causal = opt_bool(root, "causal");  // Laguna: top-level causal
  d.causal = a.dflash_causal;
  d.v2 = parse_dflash2(dc, raw, d.speculators_type);  // DFlash2 (model/dflash2_draft.h)
  bool sinks = false;
  if (auto s = opt_bool(dcfg, "attention_sink_bias")) sinks = *s;
  else if (auto s2 = opt_bool(root, "add_swa_attention_sink_bias")) sinks = *s2;

  if (auto cap = opt_num(root, "final_logit_softcapping")) {  // gemma-4 drafters: the target's cap
    DFL_CHECK(*cap > 0, "config: final_logit_softcapping must be positive");
    c.final_logit_softcap = static_cast<float>(*cap);
  }
  c.layers.assign(c.n_layers, proto);
  for (int il = 0; il < c.n_layers; ++il) {
    const ResolvedAttn r = resolve_draft_layer_attention(a, il, c.n_layers);
    LayerSpec& l = c.layers[il];
    l.attn = r.kind;
    l.window = r.window;
    l.sinks = sinks;
  }
  c.dflash = std::move(d);
}

bool claims_dflash(const nlohmann::json& root) {
  return root.is_object() && (root.contains("dflash_config") || is_speculators(root));
}

// GGUF drafters as llama.cpp's converter writes them (`general.architecture` = dflash): the
// metadata as the z-lab config it came from. Two conventions undone here: `dflash.target_layers`
// is stored +1-shifted (the layer whose INPUT is tapped), and the mask token sits on the standard
// `tokenizer.ggml.mask_token_id`. There is no embedding or head (shared with the target) and no
// vocabulary size key: the tokenizer's length, or the mask id + 1, stands in.
json dflash_gguf_config(const GgufFile& f) {
  const std::string a = "dflash.";
  json c = gguf_decoder_geometry(f, "dflash", 32768);
  c["architectures"] = {"DFlashDraftModel"};
  c["model_type"] = "qwen3";
  const uint32_t L = c["num_hidden_layers"];
  c["rope_theta"] = f.get_f32_or(a + "rope.freq_base", 1e6f);
  const int32_t mask = int32_t(f.get_i64("tokenizer.ggml.mask_token_id"));
  c["vocab_size"] = f.has("tokenizer.ggml.tokens")
                        ? int64_t(f.get_string_array("tokenizer.ggml.tokens").size())
                        : int64_t(mask) + 1;
  json d;
  d["mask_token_id"] = mask;
  std::vector<int32_t> ids;
  for (int32_t t : f.get_i32_array(a + "target_layers")) {
    DFL_CHECK(t >= 1, "GGUF '", f.path(), "': dflash.target_layers entry ", t,
              " (stored +1-shifted) must be at least 1");
    ids.push_back(t - 1);
  }
  d["target_layer_ids"] = ids;
  c["dflash_config"] = d;
  c["block_size"] = f.get_u32(a + "block_size");
  if (f.has(a + "attention.sliding_window")) {
    c["sliding_window"] = f.get_u32(a + "attention.sliding_window");
    if (f.has(a + "attention.sliding_window_pattern")) {
      // Per layer: true = sliding.
      json types = json::array();
      // llama.cpp writes a bool array; integer arrays are read too.
      const std::string key = a + "attention.sliding_window_pattern";
      const GgufValue& pat = f.get_array(key);
      std::vector<int32_t> sws;
      if (pat.elem == GgufType::kBool)
        for (uint64_t i = 0; i < pat.count; ++i) sws.push_back(int32_t(pat.array_i64(i)));
      else
        sws = f.get_i32_array(key);
      for (int32_t sw : sws) types.push_back(sw ? "sliding_attention" : "full_attention");
      c["layer_types"] = types;
    } else {
      c["layer_types"] = json(std::vector<std::string>(L, "sliding_attention"));
    }
  }
  if (f.has(a + "attention.causal")) c["is_causal"] = f.get_bool(a + "attention.causal");
  dflash2_gguf_config(f, c);  // DFlash2 keys (model/dflash2_draft.h)
  return c;
}

// llama.cpp tensor names → the z-lab layout (mainline writes "fc" / "hidden_norm"; some forks
// "dflash_fc" / "dflash_hidden_norm").
std::string dflash_gguf_name(std::string_view n) {
  if (std::string h = dflash2_gguf_name(n); !h.empty()) return h;
  static const std::pair<const char*, const char*> kTop[] = {
      {"fc.weight", "fc.weight"}, {"dflash_fc.weight", "fc.weight"},
      {"hidden_norm.weight", "hidden_norm.weight"}, {"dflash_hidden_norm.weight", "hidden_norm.weight"},
      {"output_norm.weight", "norm.weight"}};
  return gguf_rename(n, kTop, gguf_decoder_layer_names(), "layers.");
}

}  // namespace

const FamilyEntry kDFlashDraftFamily = {Family::kDFlashDraft,
                                        {"DFlashDraftModel", "DFlashSpeculator", "DFlash2Speculator",
                                         "DFlash2DraftModel"},
                                        {},
                                        claims_dflash,
                                        parse_dflash,
                                        nullptr,
                                        {"dflash"},
                                        dflash_gguf_config,
                                        dflash_gguf_name};

std::string mask_embedding_file(const std::string& dir) {
  const std::string path = dir + "/mask_embedding.pt";
  return file_exists(path) ? path : std::string();
}

DFlashDraftModel::DFlashDraftModel(const std::string& dir, const CausalLM& target,
                                   const LoadOptions& opts, ThreadPool& pool)
    : cfg_(load_model_config(dir)), ck_owned_(open_checkpoint(cfg_)), ck_(*ck_owned_), pool_(pool) {
  DFL_CHECK(cfg_.family == Family::kDFlashDraft, "'", dir, "' is not a DFlash drafter (architecture '",
            cfg_.architecture, "')");
  const ModelConfig& tc = target.config();
  const DFlashSpec& d = *cfg_.dflash;
  const int32_t H = cfg_.hidden_size, Ht = tc.hidden_size, K = int32_t(d.target_layer_ids.size());
  DFL_CHECK(H == Ht, "drafter hidden_size ", H, " does not match the target's ", Ht);
  DFL_CHECK(!(d.sample_from_anchor && d.v2), "'", dir,
            "': sample_from_anchor with DFlash2 (speculators refuses it too)");
  // The head is the target's (z-lab gemma-4 drafters state the target's cap, 30): a drafter
  // trained with a different soft-cap than the target applies would draft from other logits.
  DFL_CHECK(cfg_.final_logit_softcap == 0.0f || cfg_.final_logit_softcap == tc.final_logit_softcap,
            "'", dir, "': drafter final_logit_softcapping ", cfg_.final_logit_softcap,
            " differs from the target's ", tc.final_logit_softcap, " (the drafter uses the target's head)");
  DFL_CHECK(cfg_.vocab_size == tc.vocab_size || d.mask_token_id < tc.vocab_size,
            "drafter mask_token_id ", d.mask_token_id, " is outside the target vocabulary");
  for (int32_t t : d.target_layer_ids) {
    DFL_CHECK(t >= 0 && t < tc.n_layers, "drafter target_layer_ids names layer ", t,
              " but the target has ", tc.n_layers, " layers");
    aux_.push_back(t + 1);  // tap t = output of target layer t = aux index t + 1
  }
  prefix_ = ck_.contains("model.fc.weight") || ck_.contains("model.layers.0.input_layernorm.weight")
                ? "model."
                : "";
  const TensorInfo* fc = ck_.find(prefix_ + "fc.weight");
  DFL_CHECK(fc, "drafter '", dir, "' has no '", prefix_, "fc.weight' tensor");
  DFL_CHECK(fc->shape.size() == 2 && fc->shape[1] == int64_t(K) * Ht,
            "drafter fc input width ", fc->shape.size() == 2 ? fc->shape[1] : -1, " does not match ",
            K, " taps x target hidden ", Ht, " = ", int64_t(K) * Ht,
            ": this drafter was not trained for this target");
  fc_ = load_linear(ck_, prefix_ + "fc.weight", H, int64_t(K) * Ht);
  convert_weight(fc_, opts, owned_, &pool);
  target_vocab_ = tc.vocab_size;
  hidden_norm_ = load_vector(ck_, prefix_ + "hidden_norm.weight", H);
  final_norm_ = load_vector(ck_, prefix_ + "norm.weight", H);
  if (d.reduced_vocab(cfg_.vocab_size)) load_draft_vocab(dir, target, opts);
  std::vector<std::pair<RopeSpec, float>> keys;
  for (int32_t il = 0; il < cfg_.n_layers; ++il) {
    const LayerSpec& s = cfg_.layers[il];
    layers_.push_back(load_dense_layer(ck_, str(prefix_, "layers.", il, "."), s, H,
                                       cfg_.intermediate_size, opts, &pool));
    AttnWeights& a = layers_.back().attn;
    a.value_scale = d.attention_value_scale;
    a.params = attn_params(s, a.sinks);
    a.rope = intern_rope(ropes_, keys, s.rope);
    ctx_rope_.push_back(intern_rope(ropes_, keys, s.rope, d.backbone_rotary_base.value_or(0.0f)));
  }
  if (d.v2) v2_ = std::make_unique<DFlash2Parts>(ck_, prefix_, cfg_, opts, &pool);
  require_all_used(ck_, cfg_);

  const std::string mpath = mask_embedding_file(dir);
  if (!mpath.empty()) {
    MaskEmbedding me = read_mask_embedding(mpath, H, d.mask_token_id);
    mask_embedding_ = std::move(me.values);
    mask_embedding_path_ = mpath;
  }

  KvPoolOptions po;
  po.max_seqs = opts.n_seqs;
  po.slack = std::max(opts.max_block, d.block_size);
  po.max_context = opts.max_context + po.slack;
  po.dtype = opts.kv_dtype;
  own_kv_ = std::make_unique<KvPool>(kv_layout(cfg_), po);
  kv_ = own_kv_.get();
}

int64_t DFlashDraftModel::out_vocab() const {
  return own_head() ? int64_t(draft_to_target_.size()) : target_vocab_;
}

void DFlashDraftModel::load_draft_vocab(const std::string& dir, const CausalLM& target,
                                        const LoadOptions& opts) {
  const int32_t Vd = cfg_.dflash->draft_vocab_size, H = cfg_.hidden_size;
  const int64_t Vt = target.config().vocab_size;
  DFL_CHECK(ck_.contains(prefix_ + "lm_head.weight"), "drafter '", dir, "' has draft_vocab_size ", Vd,
            " (vocab_size ", cfg_.vocab_size, ") but no '", prefix_,
            "lm_head.weight' [draft_vocab_size, hidden]: a reduced-vocabulary drafter needs its own head");
  head_.lm_head = load_linear(ck_, prefix_ + "lm_head.weight", Vd, H);
  convert_weight(head_.lm_head, opts, owned_, &pool_);
  head_.prepare_argmax(&pool_);
  head_.vocab = Vd;
  head_.hidden = H;
  // d2t[i] = target_id − i (speculators' convention: target_id = draft_id + d2t[draft_id]).
  const TensorInfo& d2t = ck_.require(prefix_ + "d2t", DTypeSet{DType::kI64, DType::kI32}, {Vd});
  draft_to_target_.resize(size_t(Vd));
  std::vector<uint8_t> seen(size_t(Vt), 0);
  for (int32_t i = 0; i < Vd; ++i) {
    int64_t off = 0;
    if (d2t.dtype == DType::kI64) std::memcpy(&off, d2t.data + size_t(i) * 8, 8);
    else {
      int32_t o32 = 0;
      std::memcpy(&o32, d2t.data + size_t(i) * 4, 4);
      off = o32;
    }
    const int64_t t = int64_t(i) + off;
    DFL_CHECK(t >= 0 && t < Vt, "drafter '", dir, "': d2t[", i, "] = ", off, " maps draft id ", i,
              " to target id ", t, ", outside the target vocabulary of ", Vt);
    DFL_CHECK(!seen[size_t(t)], "drafter '", dir, "': d2t maps two draft ids to target id ", t);
    seen[size_t(t)] = 1;
    draft_to_target_[size_t(i)] = static_cast<int32_t>(t);
  }
  // t2d (optional, bool [vocab]): must mark exactly the d2t image.
  if (ck_.contains(prefix_ + "t2d")) {
    const TensorInfo& t2d =
        ck_.require(prefix_ + "t2d", DTypeSet{DType::kBool, DType::kU8}, {cfg_.vocab_size});
    for (int64_t t = 0; t < cfg_.vocab_size; ++t) {
      const bool in = t2d.data[t] != 0, mapped = t < Vt && seen[size_t(t)];
      DFL_CHECK(in == mapped, "drafter '", dir, "': t2d[", t, "] = ", in,
                " disagrees with d2t (which ", mapped ? "maps" : "does not map", " a draft id to it)");
    }
  }
}

void DFlashDraftModel::run(const std::vector<DraftJob>& jobs, CausalLM& target,
                           std::vector<float>& logits, std::vector<float>* hidden,
                           std::vector<int32_t>* picks) {
  prepare(jobs);
  append_contexts(jobs);
  draft_blocks(jobs, target, logits, hidden, picks);
}

void DFlashDraftModel::prepare(const std::vector<DraftJob>& jobs) {
  for (const DraftJob& j : jobs) {
    DFL_CHECK(j.seq >= 0 && j.seq < kv_->max_seqs(), "drafter sequence slot ", j.seq, " out of range");
    DFL_CHECK(j.n_ctx >= 0 && (j.n_ctx <= kv_->slack() || !kv_->has_rings()), "drafter context of ", j.n_ctx,
              " rows at once (limit ", kv_->slack(), ")");
    DFL_CHECK(j.n_block == 0 || (j.n_block >= 2 && (j.n_block <= kv_->slack() || !kv_->has_rings())), "draft block of ",
              j.n_block, " tokens (limit ", kv_->slack(), ")");
    const int32_t end = kv_->length(j.seq) + j.n_ctx + j.n_block;
    DFL_CHECK(end <= kv_->max_context(), "drafter context overflow: ", end, " > ", kv_->max_context());
    DFL_CHECK(kv_->ensure(j.seq, end), "the drafter KV pool is out of pages");
  }
}

void DFlashDraftModel::append_contexts(const std::vector<DraftJob>& jobs) {
  const int32_t H = cfg_.hidden_size;
  const int64_t in = fc_.n_in;
  const float eps = cfg_.rms_norm_eps;
  psegs_.clear();
  int32_t rows = 0;
  for (const DraftJob& j : jobs) {
    if (!j.n_ctx) continue;
    psegs_.push_back({j.seq, 0, j.n_ctx, kv_->length(j.seq)});
    rows += j.n_ctx;
  }
  if (!rows) return;
  float* taps = Scratch::ensure(taps_, size_t(rows) * in);
  size_t r = 0;
  for (const DraftJob& j : jobs) {
    if (!j.n_ctx) continue;
    std::copy_n(j.ctx_taps, size_t(j.n_ctx) * in, taps + r * in);
    r += size_t(j.n_ctx);
  }
  plan_.build(psegs_.data(), int32_t(psegs_.size()), ropes_);
  float* c = Scratch::ensure(c_, size_t(rows) * H);
  ops::matmul(taps, rows, fc_, c, pool_);                       // [rows, H]
  ops::rms_norm(c, hidden_norm_.data(), rows, H, eps, c, &pool_);
  for (int32_t il = 0; il < cfg_.n_layers; ++il) {
    const LayerSpec& s = cfg_.layers[il];
    const int64_t nk = int64_t(s.n_kv_heads) * s.head_dim, nv = int64_t(s.n_kv_heads) * s.v_head_dim;
    float* k = Scratch::ensure(k_, size_t(rows) * nk);
    float* v = Scratch::ensure(v_, size_t(rows) * nv);
    project_qkv(layers_[il].attn, s, c, rows, plan_.cos(ctx_rope_[il]), plan_.sin(ctx_rope_[il]),
                eps, nullptr, k, v, sc_, pool_);
    for (const PlanSegment& g : plan_.segments())
      kv_->write(g.seq, il, g.pos0, g.n, k + size_t(g.row0) * nk, v + size_t(g.row0) * nv);
  }
  for (const PlanSegment& g : plan_.segments()) kv_->commit_length(g.seq, g.pos0 + g.n);
}

void DFlashDraftModel::draft_blocks(const std::vector<DraftJob>& jobs, CausalLM& target,
                                    std::vector<float>& logits, std::vector<float>* hidden,
                                    std::vector<int32_t>* picks) {
  const int32_t H = cfg_.hidden_size;
  const float eps = cfg_.rms_norm_eps;
  psegs_.clear();
  tokens_.clear();
  int32_t rows = 0, out_rows = 0;
  for (const DraftJob& j : jobs) {
    if (!j.n_block) continue;
    psegs_.push_back({j.seq, 0, j.n_block, kv_->length(j.seq)});
    tokens_.insert(tokens_.end(), j.block, j.block + j.n_block);
    rows += j.n_block;
    out_rows += j.n_block - 1;
  }
  if (picks) picks->resize(size_t(out_rows));
  if (!rows || picks) logits.clear();
  if (!rows) return;
  if (!picks) logits.resize(size_t(out_rows) * size_t(out_vocab()));
  plan_.build(psegs_.data(), int32_t(psegs_.size()), ropes_);
  float* x = Scratch::ensure(x_, size_t(rows) * H);
  target.embed(tokens_.data(), rows, x);
  if (!mask_embedding_.empty()) {
    const int32_t mask = cfg_.dflash->mask_token_id;
    for (int32_t i = 0; i < rows; ++i)
      if (tokens_[i] == mask) std::copy(mask_embedding_.begin(), mask_embedding_.end(), x + size_t(i) * H);
  }
  for (int32_t il = 0; il < cfg_.n_layers; ++il) {
    SublayerWrap* aw = v2_ ? v2_->attention_conv(il, plan_, pool_) : nullptr;
    attention_sublayer(layers_[il].attn, cfg_.layers[il], x, plan_, H, eps, *kv_, il, sc_, pool_, aw);
    SublayerWrap* mw = v2_ ? v2_->mlp_conv(il, plan_, pool_) : nullptr;
    ffn_sublayer(layers_[il].ffn, cfg_, x, rows, sc_, pool_, mw);
  }
  for (const PlanSegment& g : plan_.segments()) kv_->truncate(g.seq, g.pos0);  // context only
  ops::rms_norm(x, final_norm_.data(), rows, H, eps, x, &pool_);
  if (hidden) hidden->assign(x, x + size_t(rows) * H);
  float* xl = Scratch::ensure(xl_, size_t(out_rows) * H);
  // Block row j predicts the token at s + j (row 0 is the anchor, no prediction): the drafts are
  // rows 1..n−1. A sample_from_anchor (DSpark-style) drafter's row j predicts s + j + 1, so its
  // drafts are rows 0..n−2 (the same B−1 drafts per block; its last row's prediction is unused).
  const int32_t first = cfg_.dflash->sample_from_anchor ? 0 : 1;
  int32_t o = 0;
  for (const PlanSegment& g : plan_.segments()) {
    std::copy_n(x + size_t(g.row0 + first) * H, size_t(g.n - 1) * H, xl + size_t(o) * H);
    o += g.n - 1;
  }
  if (picks && own_head()) head_.argmax(xl, out_rows, picks->data(), pool_);  // draft ids
  else if (picks) target.lm_head_argmax(xl, out_rows, picks->data());       // target ids
  else if (own_head()) head_.logits(xl, out_rows, logits.data(), pool_);  // [out_rows, draft_vocab]
  else target.lm_head(xl, out_rows, logits.data());                       // [out_rows, target vocab]
}

void DFlashDraftModel::append_context(int32_t seq, const float* taps, int32_t n, int32_t pos0) {
  DFL_CHECK(pos0 == kv_->length(seq), "drafter context at ", pos0, " but cache holds ", kv_->length(seq));
  const int32_t chunk = kv_->has_rings() ? kv_->slack() : std::max(n, 1);
  std::vector<DraftJob> jobs(1);
  for (int32_t c0 = 0; c0 < n; c0 += chunk) {
    jobs[0].seq = seq;
    jobs[0].ctx_taps = taps + size_t(c0) * fc_.n_in;
    jobs[0].n_ctx = std::min(chunk, n - c0);
    jobs[0].n_block = 0;
    prepare(jobs);
    append_contexts(jobs);
  }
}

void DFlashDraftModel::draft_block(int32_t seq, const int32_t* tokens, int32_t n, int32_t pos0,
                                   CausalLM& target, float* logits, float* hidden) {
  DFL_CHECK(pos0 == kv_->length(seq), "draft block at ", pos0, " but context holds ", kv_->length(seq));
  std::vector<DraftJob> jobs(1);
  jobs[0].seq = seq;
  jobs[0].block = tokens;
  jobs[0].n_block = n;
  std::vector<float> lg, hd;
  run(jobs, target, lg, hidden ? &hd : nullptr);
  if (logits) std::copy(lg.begin(), lg.end(), logits);
  if (hidden) std::copy(hd.begin(), hd.end(), hidden);
}

int64_t DFlashDraftModel::weight_bytes() const {
  int64_t b = dfl::weight_bytes(fc_) + (own_head() ? dfl::weight_bytes(head_.lm_head) : 0);
  for (const auto& l : layers_) b += l.matrix_bytes(cfg_);
  if (v2_) b += v2_->weight_bytes();
  return b;
}

}  // namespace dfl
