// Engine: assembly (target, drafter, proposer, pools with the KV budget, calibration, assets)
// and the text layer over the token-level scheduler (prompt rendering, detokenization, stop
// strings, logprobs, client updates, metrics).
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "chat/content_parts.h"
#include "core/error.h"
#include "engine/calibrate.h"
#include "engine/model_assets.h"
#include "engine/scheduler.h"
#include "engine/text_stream.h"
#include "kernels/ops.h"
#include "kv/recurrent_state.h"
#include "model/gdn.h"
#include "spec/dflash_proposer.h"
#include "spec/ngram_proposer.h"

namespace dfl {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    default: return "none";
  }
}

namespace {

std::string folder_name(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t k = d.find_last_of('/');
  return k == std::string::npos ? d : d.substr(k + 1);
}

// log p(token) and the top-n of one logits row (T = 1, as OpenAI-style servers report).
TokenLogprob logprob_of(const float* logits, int64_t V, int32_t token, int32_t top_n,
                        std::vector<int32_t>& idx) {
  float mx = logits[0];
  for (int64_t i = 1; i < V; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = float(double(logits[token]) - lse);
  if (top_n > 0) {
    idx.resize(size_t(V));
    for (int64_t i = 0; i < V; ++i) idx[size_t(i)] = int32_t(i);
    const int32_t n = int32_t(std::min<int64_t>(top_n, V));
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int32_t i = 0; i < n; ++i) lp.top.emplace_back(idx[size_t(i)], float(double(logits[idx[size_t(i)]]) - lse));
  }
  return lp;
}

}  // namespace

struct Engine::Impl {
  EngineOptions opts;
  std::unique_ptr<ThreadPool> pool;
  ModelAssets assets;
  std::unique_ptr<CausalLM> target;
  std::unique_ptr<Proposer> proposer;  // DFlash, n-gram, or none
  DFlashProposer* dflash = nullptr;     // when the proposer is DFlash
  std::unique_ptr<KvPool> target_kv, draft_kv;
  std::unique_ptr<Scheduler> sched;
  ModelInfo info;
  EngineMetrics m;
  std::vector<int32_t> idx_scratch;

  struct Live {
    Request req;  // prompt moved out
    std::optional<TextStream> text;
  };
  std::map<RequestId, Live> live;

  void build();
  void on_event(RequestId id, const SeqEvent& ev, bool& go);
};

void Engine::Impl::build() {
  const int threads = opts.threads > 0 ? opts.threads : hardware_threads();
  pool = std::make_unique<ThreadPool>(threads);
  assets = ModelAssets::load(opts.model_dir);
  DFL_CHECK(opts.max_seqs >= 1 && opts.max_seqs <= 4096, "max_seqs must be in [1, 4096]");
  DFL_CHECK(opts.max_batch_tokens >= 1, "max_batch_tokens must be positive");
  DFL_CHECK(opts.max_context >= 2, "the context must hold at least 2 tokens");

  LoadOptions lo;
  lo.max_context = opts.max_context;
  lo.weights_format = opts.weights_format;
  lo.prepack = opts.prepack;
  lo.config = opts.config;
  lo.n_seqs = 1;  // the models' own default pools stay tiny; the engine attaches its pools
  lo.kv_dtype = opts.kv_dtype;
  int32_t block = 1;
  std::optional<ModelConfig> dcfg;
  int32_t ngram_n = 0;
  if (opts.draft_dir == "ngram" || opts.draft_dir.rfind("ngram:", 0) == 0) {
    // Prompt lookup (`--draft ngram[:N]`, N = 3 by default), blocks of 16 like the drafters.
    ngram_n = opts.draft_dir.size() > 6 ? std::atoi(opts.draft_dir.c_str() + 6) : 3;
    DFL_CHECK(ngram_n >= 1 && ngram_n <= 64, "--draft ngram:N needs N in [1, 64]");
    block = 16;
    lo.max_block = block;
  } else if (!opts.draft_dir.empty()) {
    dcfg = load_model_config(opts.draft_dir);
    DFL_CHECK(dcfg->dflash.has_value(), "'", opts.draft_dir, "' is not a DFlash drafter");
    block = dcfg->dflash->block_size;
    lo.max_block = block;
  }
  target = opts.load_target ? opts.load_target(opts.model_dir, lo, *pool)
                           : load_causal_lm(opts.model_dir, lo, *pool);
  const int32_t ctx = target->max_context();
  if (dcfg) {
    auto drafter = std::make_unique<DFlashDraftModel>(opts.draft_dir, *target, lo, *pool);
    auto p = std::make_unique<DFlashProposer>(std::move(drafter), *target);
    dflash = p.get();
    proposer = std::move(p);
  } else if (ngram_n) {
    proposer = std::make_unique<NgramProposer>(ngram_n, block - 1, target->config().vocab_size);
  }

  // The KV budget: both pools get the same number of pages (a page holds block_slots
  // positions of every full layer); rings are fixed per slot.
  const int32_t chunk = std::min(SchedulerOptions{}.prefill_chunk, opts.max_batch_tokens);
  KvPoolOptions po;
  po.max_seqs = opts.max_seqs;
  po.max_context = ctx;
  po.slack = std::max({block, chunk, 16});
  po.dtype = opts.kv_dtype;
  KvPool probe_t(target->kv_layers(), [&] { auto p = po; p.n_blocks = 1; p.max_seqs = 1; return p; }());
  int64_t bpb = probe_t.bytes_per_block(), rings = probe_t.ring_bytes_per_seq();
  KvPoolOptions dpo = po;
  dpo.max_context = ctx + po.slack;
  if (dflash) {
    KvPool probe_d(kv_layout(dflash->drafter().config()), [&] { auto p = dpo; p.n_blocks = 1; p.max_seqs = 1; return p; }());
    bpb += probe_d.bytes_per_block();
    rings += probe_d.ring_bytes_per_seq();
  }
  // Recurrent layer states (Gated DeltaNet conv + ssm, double-buffered, + the replay rows of a
  // block) are fixed per slot like the rings, and come out of the same budget.
  const int64_t recurrent =
      n_recurrent_layers(target->config()) > 0
          ? recurrent_bytes_per_sequence(recurrent_spec(target->config()), lo.max_block)
          : 0;
  if (opts.kv_memory_bytes > 0) {
    const int64_t fixed = (rings + recurrent) * opts.max_seqs;
    DFL_CHECK(fixed < opts.kv_memory_bytes, "--kv-memory ", opts.kv_memory_bytes,
              " bytes cannot hold the per-sequence state of ", opts.max_seqs, " sequences (",
              fixed, " bytes: ", rings, " of sliding-window rings + ", recurrent,
              " of recurrent states per sequence)");
    po.n_blocks = dpo.n_blocks = bpb > 0 ? std::max<int64_t>(1, (opts.kv_memory_bytes - fixed) / bpb) : 0;
  } else {
    po.n_blocks = dpo.n_blocks = int64_t(opts.max_seqs) * ((dpo.max_context + 15) / 16);
  }
  target_kv = std::make_unique<KvPool>(target->kv_layers(), po);
  target->attach_kv(target_kv.get());
  if (dflash) {
    draft_kv = make_kv_pool(dflash->drafter().config(), dpo);
    dflash->drafter().attach_kv(draft_kv.get());
  }

  SchedulerOptions so;
  so.max_seqs = opts.max_seqs;
  so.max_batch_tokens = opts.max_batch_tokens;
  so.prefill_chunk = chunk;
  so.default_block = opts.default_block_size;
  so.groups = opts.microbatches;
  if (proposer && opts.calibrate) {
    // The step cost curve t(R) for auto draft lengths: one sequence's forward of R rows,
    // R = 1, 2, 4, ..., block, and on to the step budget (a batch of decoders costs about the
    // rows it carries: the weights are streamed once either way).
    std::vector<int32_t> bs;
    const int32_t top = std::max(block, std::min(chunk, 256));
    for (int32_t b = 1; b <= top; b *= 2) bs.push_back(b);
    if (bs.back() < block) bs.push_back(block);
    std::sort(bs.begin(), bs.end());
    bs.erase(std::unique(bs.begin(), bs.end()), bs.end());
    const int32_t cal_ctx = std::min<int32_t>(32, ctx - bs.back());
    if (cal_ctx >= 0) so.verify_cost = measure_verify_curve(*target, 0, bs, cal_ctx, 1, &proposer->target_aux());
    // The drafter pass over 1, 2, 4, ... full blocks (up to max_seqs, or the step budget).
    std::vector<int32_t> ns;
    for (int32_t n = 1; n <= opts.max_seqs && n * block <= std::max(256, block); n *= 2) ns.push_back(n);
    if (dflash) so.draft_cost = measure_draft_curve(*proposer, target->config().hidden_size, block, ns, 1);
  }
  Proposer* used = proposer.get();
  if (opts.wrap_proposer)
    if (Proposer* w = opts.wrap_proposer(used)) used = w;
  sched = std::make_unique<Scheduler>(*target, used, so);

  info.name = folder_name(opts.model_dir);
  info.vocab_size = target->config().vocab_size;
  info.max_context = ctx;
  info.has_drafter = proposer != nullptr;
  info.drafter_block_size = proposer ? block : 0;
  m.kv_blocks_total = target_kv->blocks_total();
  m.spec_accepted_per_pos_total.assign(size_t(std::max(0, block - 1)), 0);
}

Engine::Engine(const EngineOptions& opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = opts;
  impl_->build();
}

Engine::~Engine() = default;

const ModelInfo& Engine::info() const { return impl_->info; }
const Tokenizer* Engine::tokenizer() const {
  return impl_->assets.tokenizer ? &*impl_->assets.tokenizer : nullptr;
}
const ChatTemplate* Engine::chat_template() const {
  return impl_->assets.chat ? &*impl_->assets.chat : nullptr;
}
const std::vector<int32_t>& Engine::eos_ids() const { return impl_->assets.eos_ids; }
bool Engine::idle() const { return impl_->sched->idle(); }

std::vector<int32_t> Engine::render_prompt(const Prompt& p) const {
  if (!p.ids.empty()) return p.ids;
  const ModelAssets& a = impl_->assets;
  auto invalid = [](const std::string& msg) { return RequestRefused{RequestRefused::Kind::kInvalid, msg}; };
  if (p.messages.is_array()) {
    if (!a.chat) throw invalid("this model has no chat template: send a plain prompt");
    if (!a.tokenizer) throw invalid(str("'", impl_->opts.model_dir, "' has no tokenizer.json: send token ids"));
    ChatOptions opt;
    opt.add_generation_prompt = true;
    opt.tools = p.tools;
    opt.extra["enable_thinking"] = impl_->opts.default_enable_thinking;
    if (p.template_kwargs.is_object())
      for (auto it = p.template_kwargs.begin(); it != p.template_kwargs.end(); ++it) opt.extra[it.key()] = it.value();
    try {
      require_text_only(p.messages);
    } catch (const Error& e) {
      throw invalid(e.what());
    }
    std::string text;
    try {
      text = render_chat(*a.chat, p.messages, opt);
    } catch (const Error& e) {
      throw invalid(str("chat template: ", e.what()));
    }
    return a.tokenizer->encode(text, false);
  }
  if (p.text.empty()) throw invalid("the prompt is empty");
  if (!a.tokenizer) throw invalid(str("'", impl_->opts.model_dir, "' has no tokenizer.json: send token ids"));
  return a.tokenizer->encode(p.text, true);
}

RequestId Engine::submit(Request req) {
  Impl& im = *impl_;
  if (im.sched->waiting() >= im.opts.max_queue)
    throw RequestRefused{RequestRefused::Kind::kQueueFull,
                         str("the queue is full (", im.opts.max_queue, " waiting requests)")};
  if (req.top_logprobs > 20)
    throw RequestRefused{RequestRefused::Kind::kInvalid, "top_logprobs must be at most 20"};
  if (req.block_size != kBlockAuto && req.block_size < 0)
    throw RequestRefused{RequestRefused::Kind::kInvalid, "block_size must be 'auto' or a positive number"};
  SeqRequest sr;
  sr.prompt = render_prompt(req.prompt);
  sr.max_tokens = req.max_tokens;
  sr.sampling = req.sampling;
  if (!req.ignore_eos) sr.stop_ids = im.assets.eos_ids;
  sr.stop_ids.insert(sr.stop_ids.end(), req.stop_ids.begin(), req.stop_ids.end());
  sr.speculative = req.speculative;
  sr.block_size = req.block_size;
  sr.want_logits = req.top_logprobs >= 0;
  sr.trace = req.trace;
  req.prompt = Prompt{};
  // The id is only known after submit; the callback finds its state through it.
  auto id_box = std::make_shared<RequestId>(0);
  const RequestId id = im.sched->submit(std::move(sr), [this, id_box](const SeqEvent& ev) {
    bool go = true;
    impl_->on_event(*id_box, ev, go);
    return go;
  });
  *id_box = id;
  Impl::Live& l = im.live[id];
  if (im.assets.tokenizer) l.text.emplace(*im.assets.tokenizer, req.stop);
  l.req = std::move(req);
  return id;
}

void Engine::Impl::on_event(RequestId id, const SeqEvent& ev, bool& go) {
  auto it = live.find(id);
  if (it == live.end()) return;
  Live& l = it->second;
  RequestUpdate up;
  up.id = id;
  up.stats = ev.stats;
  const int64_t V = info.vocab_size;
  for (int32_t i = 0; i < ev.n && go; ++i) {
    const int32_t t = ev.tokens[i];
    up.new_tokens.push_back(t);
    if (l.req.top_logprobs >= 0 && ev.logits)
      up.logprobs.push_back(logprob_of(ev.logits + size_t(i) * size_t(V), V, t, l.req.top_logprobs, idx_scratch));
    if (l.text) {
      up.text_delta += l.text->push(t);
      if (l.text->stopped()) go = false;  // a stop string completed: end here
    }
  }
  m.generation_tokens_total += int64_t(up.new_tokens.size());
  if (ev.finished) {
    if (l.text) up.text_delta += l.text->finish();
    up.finished = true;
    up.reason = ev.reason;
    if (l.req.trace) up.trace = ev.trace;
    const RequestStats& s = *ev.stats;
    m.prompt_tokens_total += s.prompt_tokens;
    m.spec_drafts_total += s.draft_steps;
    m.spec_draft_tokens_total += s.drafted_tokens;
    m.spec_accepted_tokens_total += s.accepted_tokens;
    for (size_t j = 0; j < s.accepted_per_position.size() && j < m.spec_accepted_per_pos_total.size(); ++j)
      m.spec_accepted_per_pos_total[j] += s.accepted_per_position[j];
  }
  if (l.req.on_update && (up.finished || !up.new_tokens.empty())) l.req.on_update(up);
  if (ev.finished) live.erase(it);
}

void Engine::cancel(RequestId id) { impl_->sched->cancel(id); }

bool Engine::step() {
  const bool did = impl_->sched->step();
  if (did) ++impl_->m.steps_total;
  return did;
}

void Engine::run_until_idle() {
  while (!idle()) step();
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m = impl_->m;
  m.running = impl_->sched->running();
  m.waiting = impl_->sched->waiting();
  m.kv_blocks_used = impl_->target_kv->blocks_used();
  m.kv_blocks_total = impl_->target_kv->blocks_total();
  m.kv_usage = m.kv_blocks_total ? double(m.kv_blocks_used) / double(m.kv_blocks_total) : 0.0;
  m.preemptions_total = impl_->sched->preemptions();
  return m;
}

}  // namespace dfl
