#include "model/decoder.h"

#include <algorithm>

#include "core/error.h"

#include "model/family.h"

namespace dfl {

std::unique_ptr<Checkpoint> open_checkpoint(const ModelConfig& cfg) {
  if (!cfg.gguf) return std::make_unique<Checkpoint>(cfg.dir);
  const FamilyEntry& f = family_of(cfg);
  DFL_CHECK(f.gguf_tensor_name, "'", cfg.dir, "': no GGUF tensor names for ", cfg.architecture);
  return std::make_unique<Checkpoint>(
      cfg.dir, [&](std::string_view n) { return f.gguf_tensor_name(n); },
      f.gguf_row_order ? Checkpoint::RowOrder(f.gguf_row_order) : Checkpoint::RowOrder());
}

DecoderLM::DecoderLM(ModelConfig cfg, ThreadPool& pool)
    : cfg_(std::move(cfg)), ck_owned_(open_checkpoint(cfg_)), ck_(*ck_owned_), pool_(pool) {}

void DecoderLM::set_stage(const StageRange& r) {
  const int32_t L = cfg_.n_layers;
  const int32_t end = r.end < 0 ? L : r.end;
  DFL_CHECK(r.begin >= 0 && r.begin < end && end <= L, "pipeline stage layers [", r.begin, ", ",
            end, ") are not a non-empty range of the ", L, " layers");
  begin_ = r.begin;
  end_ = end;
}

bool is_mtp_tensor(const std::string& name) {
  return name.rfind("mtp.", 0) == 0 || name.find(".mtp.") != std::string::npos;
}

int32_t decoder_layer_of(const std::string& name) {
  if (is_mtp_tensor(name)) return -1;
  for (size_t k = name.find("layers."); k != std::string::npos; k = name.find("layers.", k + 1)) {
    if (k > 0 && name[k - 1] != '.') continue;
    size_t i = k + 7;
    int32_t v = 0;
    const size_t d0 = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - d0 < 6) v = v * 10 + (name[i++] - '0');
    if (i > d0 && i < name.size() && name[i] == '.') return v;
  }
  return -1;
}

void DecoderLM::finish_load(const LoadOptions& opts, const std::vector<std::string>& ignore_in) {
  if (end_ < 0) set_stage(StageRange{});
  DFL_ASSERT(int32_t(layers_.size()) == cfg_.n_layers);
  std::vector<std::string> ignore = ignore_in;
  if (begin_ > 0 || end_ < cfg_.n_layers)  // another stage's layers: left unread on purpose
    for (const std::string& n : ck_.names())
      if (const int32_t il = decoder_layer_of(n); il >= 0 && (il < begin_ || il >= end_)) ignore.push_back(n);
  std::vector<std::pair<RopeSpec, float>> keys;
  for (int32_t il = 0; il < cfg_.n_layers; ++il) {
    AttnWeights& a = layers_[il].attn;
    a.rope = intern_rope(ropes_, keys, cfg_.layers[il].rope);
    a.params = attn_params(cfg_.layers[il], a.sinks);
  }
  head_.final_softcap = cfg_.final_logit_softcap;
  int32_t n_attn = 0, n_lin = 0;
  kv_layer_.assign(cfg_.n_layers, -1);
  for (int32_t il = 0; il < cfg_.n_layers; ++il) {
    DFL_ASSERT(layers_[il].mixer == cfg_.layers[il].mixer);
    // Recurrent layers keep their index among all of them (the states are sized for the whole
    // model); KV layers are numbered within the stage (kv_layers()).
    if (layers_[il].mixer != MixerKind::kAttention)
      layers_[il].gdn.layer = n_lin++;
    else if (il >= begin_ && il < end_)
      kv_layer_[il] = n_attn++;
  }
  rec_block_ = opts.max_block;
  if (has_head()) {
    convert_weight(head_.lm_head, opts, owned_, &pool_);  // head_.embed stays as stored (rows are read)
    head_.prepare_argmax(&pool_);
  } else
    head_.lm_head = WeightMatrix{};  // another stage's
  require_all_used(ck_, cfg_, ignore);
  max_context_ = std::min(opts.max_context, cfg_.max_position_embeddings);
  KvPoolOptions po;
  po.max_seqs = opts.n_seqs;
  po.max_context = max_context_;
  po.slack = opts.max_block;
  po.dtype = opts.kv_dtype;
  own_kv_ = std::make_unique<KvPool>(kv_layers(), po);
  attach_kv(own_kv_.get());
}

void DecoderLM::attach_kv(KvPool* pool) {
  kv_ = pool;
  if (n_recurrent_layers(cfg_) > 0)
    rec_ = std::make_unique<RecurrentState>(recurrent_spec(cfg_), pool->max_seqs(), rec_block_);
}

void DecoderLM::rollback_recurrent(int32_t seq, int32_t n) {
  const int32_t k = rec_->start_rollback(seq, n);
  if (k < 0) return;
  for (int32_t il = begin_; il < end_; ++il)
    if (layers_[il].mixer == MixerKind::kGatedDeltaNet)
      gdn_replay(layers_[il].gdn, *cfg_.gdn, *rec_, seq, k, sc_.gdn, pool_);
  rec_->finish_rollback(seq, n);
}

void DecoderLM::rollback(int32_t seq, int32_t n) {
  if (rec_) rec_->check_rollback(seq, n);  // refuse before any kind has changed
  kv_->truncate(seq, n);
  if (rec_) rollback_recurrent(seq, n);
}

void DecoderLM::release(int32_t seq) {
  kv_->clear(seq);
  if (rec_) rec_->clear(seq);
}

void DecoderLM::embed(const int32_t* tokens, int64_t n, float* out) const {
  head_.embed_rows(tokens, n, out);
  if (cfg_.embed_scale != 1.0f) ops::scale_inplace(out, n * int64_t(cfg_.hidden_size), cfg_.embed_scale);
}

void DecoderLM::lm_head(const float* x_normed, int64_t n, float* logits) {
  head_.logits(x_normed, n, logits, pool_);
}

void DecoderLM::lm_head_argmax(const float* x_normed, int64_t n, int32_t* out) {
  head_.argmax(x_normed, n, out, pool_);
}

void DecoderLM::norm_and_lm_head(const float* x, int64_t n, float* logits) {
  head_.norm_logits(x, n, logits, head_tmp_, pool_);
}

CausalLM::StepBytes DecoderLM::weight_bytes_per_step() const {
  StepBytes b;
  for (const auto& l : layers_) b.body += l.matrix_bytes(cfg_);  // (placeholders read nothing)
  if (embeds()) b.body += cfg_.hidden_size * int64_t(dtype_size(head_.embed.dtype));
  b.head = weight_bytes(head_.lm_head);
  b.head_plane = head_.screen.plane ? int64_t(head_.screen.plane->size()) : 0;
  return b;
}

void DecoderLM::capture_taps(const ForwardBatch& b, int32_t index, BatchOut& out) const {
  if (!b.aux || out.aux.empty()) return;
  const int32_t H = cfg_.hidden_size;
  const size_t n_aux = b.aux->size();
  for (size_t j = 0; j < n_aux; ++j) {
    if ((*b.aux)[j] != index) continue;
    for (size_t s = 0; s < b.segs.size(); ++s) {
      if (!b.segs[s].taps) continue;
      for (int32_t t = 0; t < b.segs[s].n; ++t) {
        const size_t row = size_t(out.row0[s]) + t;
        std::copy_n(x_.data() + row * H, H, out.aux.data() + (row * n_aux + j) * H);
      }
    }
  }
}

void DecoderLM::forward(const ForwardBatch& b, BatchOut& out) { forward_stage(b, nullptr, out); }

void DecoderLM::forward_stage(const ForwardBatch& b, const float* x_in, BatchOut& out) {
  DFL_CHECK(embeds() == (x_in == nullptr), embeds() ? "the first pipeline stage embeds its rows"
                                                    : "a later pipeline stage needs its input rows");
  const int32_t H = cfg_.hidden_size;
  const int64_t V = cfg_.vocab_size;
  KvPool& kv = *kv_;
  DFL_CHECK(!b.segs.empty(), "empty forward pass");
  psegs_.clear();
  out.row0.resize(b.segs.size());
  out.logits_row.resize(b.segs.size());
  out.argmax_row.resize(b.segs.size());
  int32_t rows = 0;
  int64_t logit_rows = 0, argmax_rows = 0;
  bool any_taps = false;
  for (size_t i = 0; i < b.segs.size(); ++i) {
    const SegmentSpec& g = b.segs[i];
    DFL_CHECK(g.n > 0, "empty forward segment");
    DFL_CHECK(g.seq >= 0 && g.seq < kv.max_seqs(), "sequence slot ", g.seq, " out of range");
    DFL_CHECK(g.pos0 == kv.length(g.seq), "forward: pos0 ", g.pos0, " != cached length ",
              kv.length(g.seq));
    DFL_CHECK(g.pos0 + g.n <= std::min(max_context_, kv.max_context()), "context overflow: ",
              g.pos0 + g.n, " tokens exceed the context limit of ",
              std::min(max_context_, kv.max_context()));
    DFL_CHECK(g.n <= kv.slack() || !kv.has_rings(), "a segment of ", g.n,
              " tokens exceeds the ring slack of ", kv.slack());
    DFL_CHECK(kv.ensure(g.seq, g.pos0 + g.n), "the KV pool is out of pages (", kv.blocks_free(),
              " free of ", kv.blocks_total(), ")");
    psegs_.push_back({g.seq, 0, g.n, g.pos0});
    out.row0[i] = rows;
    out.logits_row[i] = logit_rows;
    out.argmax_row[i] = argmax_rows;
    rows += g.n;
    const int64_t n_logits = g.logits == LogitsMode::kAll ? g.n : g.logits == LogitsMode::kLast ? 1 : 0;
    (g.argmax_only ? argmax_rows : logit_rows) += n_logits;
    any_taps |= g.taps;
  }
  const size_t n_aux = b.aux ? b.aux->size() : 0;
  if (b.aux)
    for (int32_t idx : *b.aux)
      DFL_CHECK(idx >= 0 && idx <= cfg_.n_layers, "aux hidden-state index ", idx,
                " is out of range [0, ", cfg_.n_layers, "]");
  if (any_taps && n_aux)
    out.aux.assign(size_t(rows) * n_aux * H, 0.0f);
  else
    out.aux.clear();

  if (rec_)
    for (const SegmentSpec& g : b.segs) {
      // A caller that truncated only the KV (kv().truncate, e.g. calibration) is caught up here.
      if (g.pos0 > 0 && rec_->length(g.seq) != g.pos0) rollback_recurrent(g.seq, g.pos0);
      rec_->begin_forward(g.seq, g.pos0, g.n);
    }
  plan_.build(psegs_.data(), int32_t(psegs_.size()), ropes_);
  float* x = Scratch::ensure(x_, size_t(rows) * H);
  if (x_in) {
    std::copy_n(x_in, size_t(rows) * H, x);
  } else {
    for (size_t i = 0; i < b.segs.size(); ++i)
      embed(b.segs[i].tokens, b.segs[i].n, x + size_t(out.row0[i]) * H);
    capture_taps(b, 0, out);
  }
  for (int32_t il = begin_; il < end_; ++il) {
    const DecoderLayer& l = layers_[il];
    if (l.mixer == MixerKind::kGatedDeltaNet)
      gdn_sublayer(l.gdn, *cfg_.gdn, x, plan_, H, cfg_.rms_norm_eps, *rec_, sc_.gdn, pool_);
    else
      attention_sublayer(l.attn, cfg_.layers[il], x, plan_, H, cfg_.rms_norm_eps, kv,
                         kv_layer_[il], sc_, pool_);
    ffn_sublayer(l.ffn, cfg_, x, rows, sc_, pool_);
    if (l.out_scale != 1.0f) ops::scale_inplace(x, int64_t(rows) * H, l.out_scale, &pool_);
    capture_taps(b, il + 1, out);
  }
  for (const SegmentSpec& g : b.segs) kv.commit_length(g.seq, g.pos0 + g.n);
  if (rec_)
    for (const SegmentSpec& g : b.segs) rec_->end_forward(g.seq);

  if (!has_head()) logit_rows = argmax_rows = 0;  // the last stage makes them
  out.logits.resize(size_t(logit_rows) * V);
  out.argmax.resize(size_t(argmax_rows));
  if (!logit_rows && !argmax_rows) return;
  // The head's input rows: those of logits segments first, then those of argmax_only ones.
  float* xl = Scratch::ensure(xl_, size_t(logit_rows + argmax_rows) * H);
  for (size_t i = 0; i < b.segs.size(); ++i) {
    const SegmentSpec& g = b.segs[i];
    const float* src = x + size_t(out.row0[i]) * H;
    float* dst = xl + size_t(g.argmax_only ? logit_rows + out.argmax_row[i] : out.logits_row[i]) * H;
    if (g.logits == LogitsMode::kAll)
      std::copy_n(src, size_t(g.n) * H, dst);
    else if (g.logits == LogitsMode::kLast)
      std::copy_n(src + size_t(g.n - 1) * H, H, dst);
  }
  if (logit_rows) norm_and_lm_head(xl, logit_rows, out.logits.data());
  if (argmax_rows)
    head_.norm_argmax(xl + size_t(logit_rows) * H, argmax_rows, out.argmax.data(), head_tmp_, pool_);
}

void CausalLM::lm_head_argmax(const float* x_normed, int64_t n, int32_t* out) {
  const int64_t V = config().vocab_size;
  thread_local std::vector<float> logits;
  if (logits.size() < size_t(n * V)) logits.resize(size_t(n * V));
  lm_head(x_normed, n, logits.data());
  ops::argmax_rows(logits.data(), n, V, out);
}

void CausalLM::forward(const ForwardArgs& a, ForwardOut& out) {
  DFL_CHECK(a.n > 0, "empty forward pass");
  const int64_t V = config().vocab_size;
  const int32_t H = config().hidden_size;
  const size_t n_aux = a.aux ? a.aux->size() : 0;
  // Ring layers take at most slack() rows per forward: long runs go in chunks (the kernels are
  // batch-invariant below the bf16 prefill-attention threshold; see kernels/ops.h).
  const int32_t chunk = kv().has_rings() ? kv().slack() : a.n;
  // One chunk (a decode step, a verify block): its logits are swapped out of the reused
  // one_seq_out_, which takes out's old buffer — the same size from a caller's previous call of
  // the same shape, so forward() neither zero-fills nor copies 16 × vocab floats per call.
  const bool one_chunk = a.n <= chunk;
  if (!one_chunk) out.logits.clear();
  out.argmax.clear();
  out.aux.assign(size_t(a.n) * n_aux * H, 0.0f);
  ForwardBatch fb;
  fb.aux = a.aux;
  fb.segs.resize(1);
  BatchOut& bo = one_seq_out_;
  for (int32_t c0 = 0; c0 < a.n; c0 += chunk) {
    const int32_t m = std::min(chunk, a.n - c0);
    const bool last = c0 + m == a.n;
    SegmentSpec& g = fb.segs[0];
    g.seq = a.seq;
    g.tokens = a.tokens + c0;
    g.n = m;
    g.pos0 = a.pos0 + c0;
    g.logits = a.logits == LogitsMode::kAll ? LogitsMode::kAll
               : (a.logits == LogitsMode::kLast && last) ? LogitsMode::kLast
                                                          : LogitsMode::kNone;
    g.argmax_only = a.argmax_only;
    g.taps = n_aux > 0;
    forward(fb, bo);
    out.argmax.insert(out.argmax.end(), bo.argmax.begin(), bo.argmax.end());
    if (one_chunk)
      out.logits.swap(bo.logits);
    else
      out.logits.insert(out.logits.end(), bo.logits.begin(), bo.logits.end());
    if (n_aux) std::copy(bo.aux.begin(), bo.aux.end(), out.aux.begin() + size_t(c0) * n_aux * H);
  }
  (void)V;
}

}  // namespace dfl
