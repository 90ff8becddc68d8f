#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "kernels/ops.h"
#include "sampling/verify.h"

namespace dfl {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
// Generated tokens are recomputed (after a preemption) in runs below the prefill-attention
// threshold, as they were computed the first time (verify blocks, single tokens).
constexpr int32_t kRecomputeChunk = 32;
// Auto draft lengths: a sequence that chose not to draft this many steps in a row drafts 2.
constexpr int32_t kExploreEvery = 4;
static_assert(kRecomputeChunk < kPrefillAttentionMinQueries);
}  // namespace

struct Scheduler::Seq {
  RequestId id = 0;
  SeqRequest req;
  SeqCallback cb;
  int32_t slot = -1;
  bool decoding = false;           // prefill done: tokens.back() is the anchor at position s()
  std::vector<int32_t> tokens;     // committed: prompt + generated
  int32_t n_prompt = 0;
  int32_t computed = 0;            // positions whose K/V the target pool holds (prefill progress)
  int32_t generated = 0;
  int32_t budget = 0;              // most tokens to generate (max_tokens, context limit)
  int32_t block = 1;               // verify rows incl. the anchor when speculating
  bool spec = false;
  Rng rng;
  std::unique_ptr<BlockPolicy> policy;  // acceptance estimates (every speculating sequence)
  bool auto_block = false;              // draft length chosen per step
  int32_t steps_without_drafts = 0;     // auto: steps since it last drafted
  RequestStats stats;
  std::vector<CycleTrace> trace;
  std::vector<float> pending;      // taps of committed positions not yet given to the proposer
  int32_t pending_n = 0, pending_pos0 = 0;
  Clock::time_point t_submit;
  bool scheduled_once = false;
  // This step.
  int32_t seg = -1;
  int32_t n_draft = 0;
  Draft draft;
  std::vector<int32_t> seg_tokens;
  bool finished = false;
  int32_t group = 0;               // micro-batch group (fixed from admission)
  bool cancelled = false;          // cancelled while its group's forward was in flight

  int32_t s() const { return int32_t(tokens.size()) - 1; }  // anchor position while decoding
  // Where prefill stops: the whole prompt (fresh), or up to the anchor (after a preemption).
  int32_t prefill_end() const { return generated ? int32_t(tokens.size()) - 1 : n_prompt; }
  int32_t next_chunk_end(int32_t chunk) const {
    if (computed < n_prompt) return std::min(n_prompt, (computed / chunk + 1) * chunk);
    return std::min(prefill_end(), computed + kRecomputeChunk);
  }
};

Scheduler::Scheduler(CausalLM& target, Proposer* proposer, const SchedulerOptions& opts)
    : target_(target), proposer_(proposer), opts_(opts) {
  vocab_ = target.config().vocab_size;
  hidden_ = target.config().hidden_size;
  max_ctx_ = std::min(target.max_context(), target.kv().max_context());
  DFL_CHECK(opts.max_seqs >= 1 && opts.max_seqs <= target.kv().max_seqs(), "max_seqs ",
            opts.max_seqs, " exceeds the KV pool's ", target.kv().max_seqs(), " slots");
  DFL_CHECK(opts.prefill_chunk >= 1, "prefill chunk must be positive");
  DFL_CHECK(!target.kv().has_rings() || opts.prefill_chunk <= target.kv().slack(),
            "prefill chunk ", opts.prefill_chunk, " exceeds the ring slack ", target.kv().slack());
  for (int32_t i = opts.max_seqs - 1; i >= 0; --i) free_slots_.push_back(i);
  DFL_CHECK(opts.groups >= 1 && opts.groups <= 64, "micro-batch groups must be in [1, 64], not ", opts.groups);
  groups_.resize(size_t(opts.groups));
}

Scheduler::~Scheduler() = default;

RequestId Scheduler::submit(SeqRequest req, SeqCallback cb) {
  const int32_t n = int32_t(req.prompt.size());
  if (n == 0) throw RequestRefused{RequestRefused::Kind::kInvalid, "the prompt is empty"};
  for (int32_t id : req.prompt)
    if (id < 0 || id >= vocab_)
      throw RequestRefused{RequestRefused::Kind::kInvalid,
                           str("prompt token id ", id, " is out of range for vocab_size ", vocab_)};
  if (req.max_tokens < 1)
    throw RequestRefused{RequestRefused::Kind::kInvalid, "max_tokens must be at least 1"};
  if (n >= max_ctx_)
    throw RequestRefused{RequestRefused::Kind::kTooLong,
                         str("the prompt has ", n, " tokens but the context holds at most ",
                             max_ctx_, " (prompt + at least one generated token)")};
  auto s = std::make_unique<Seq>();
  s->id = next_id_++;
  s->spec = proposer_ && req.speculative;
  if (s->spec) {
    const int32_t full = proposer_->max_draft() + 1;
    int32_t b = req.block_size ? req.block_size : opts_.default_block ? opts_.default_block : full;
    // Every speculating sequence tracks its acceptance (the batch choice weighs fixed-length
    // sequences by it); auto ones also choose their length from it.
    s->policy = std::make_unique<BlockPolicy>(proposer_->max_draft());
    if (!opts_.verify_cost.empty()) s->policy->set_verify_cost(opts_.verify_cost);
    if (b == kBlockAuto) {
      s->auto_block = true;
      b = full;
    }
    if (b < 1 || b > full)
      throw RequestRefused{RequestRefused::Kind::kInvalid,
                           str("block size ", b, " must be in [1, ", full, "] for this drafter")};
    s->block = b;
  }
  // Pages the prompt plus one block need, against everything the pools hold.
  const KvPool& kv = target_.kv();
  const int64_t need = (int64_t(n) + s->block + kv.block_slots() - 1) / kv.block_slots();
  if (kv.has_full_layers() && need > kv.blocks_total())
    throw RequestRefused{RequestRefused::Kind::kNoCapacity,
                         str("the prompt needs ", need, " KV pages but the budget holds ",
                             kv.blocks_total(), " (", kv.block_slots(), " tokens each)")};
  s->n_prompt = n;
  s->tokens = std::move(req.prompt);
  s->budget = std::min(req.max_tokens, max_ctx_ - n);
  s->rng = Rng(req.sampling.seed);
  s->req = std::move(req);
  s->req.prompt.clear();
  s->cb = std::move(cb);
  s->stats.prompt_tokens = n;
  s->stats.acceptance_histogram.assign(size_t(s->block), 0);
  s->stats.draft_length_histogram.assign(size_t(s->block), 0);
  s->stats.accepted_per_position.assign(size_t(std::max(0, s->block - 1)), 0);
  s->t_submit = Clock::now();
  const RequestId id = s->id;
  waiting_.push_back(std::move(s));
  return id;
}

bool Scheduler::idle() const { return waiting_.empty() && running_.empty(); }
int32_t Scheduler::running() const { return int32_t(running_.size()); }
int32_t Scheduler::waiting() const { return int32_t(waiting_.size()); }

void Scheduler::release_slot(Seq* s) {
  if (s->slot < 0) return;
  target_.release(s->slot);
  if (proposer_) proposer_->reset(s->slot);
  free_slots_.push_back(s->slot);
  s->slot = -1;
}

void Scheduler::finish(Seq* s, FinishReason why) {
  if (s->finished) return;
  s->finished = true;
  release_slot(s);
  s->stats.e2e_s = since(s->t_submit);
  if (s->cb) {
    SeqEvent ev;
    ev.id = s->id;
    ev.finished = true;
    ev.reason = why;
    ev.stats = &s->stats;
    ev.trace = &s->trace;
    s->cb(ev);
  }
}

void Scheduler::cancel(RequestId id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) {
      std::unique_ptr<Seq> s = std::move(*it);
      waiting_.erase(it);
      finish(s.get(), FinishReason::kCancelled);
      return;
    }
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if ((*it)->id == id) {
      if (groups_[size_t((*it)->group)].in_flight) {  // finished when its forward ends
        (*it)->cancelled = true;
        return;
      }
      std::unique_ptr<Seq> s = std::move(*it);
      running_.erase(it);
      finish(s.get(), FinishReason::kCancelled);
      return;
    }
}

// Emits committed tokens, stopping at a stop id or the budget; false when the sequence is done.
bool Scheduler::emit(Seq* s, const int32_t* toks, int32_t n, const float* logits) {
  FinishReason why = FinishReason::kNone;
  int32_t k = 0;
  while (k < n && why == FinishReason::kNone) {
    const int32_t t = toks[k++];
    s->tokens.push_back(t);
    ++s->generated;
    if (std::find(s->req.stop_ids.begin(), s->req.stop_ids.end(), t) != s->req.stop_ids.end())
      why = FinishReason::kStop;
    else if (s->generated >= s->budget)
      why = FinishReason::kLength;
  }
  s->stats.generated_tokens = s->generated;
  if (s->stats.ttft_s == 0 && k > 0) s->stats.ttft_s = since(s->t_submit);
  bool go = true;
  if (s->cb && k > 0) {
    SeqEvent ev;
    ev.id = s->id;
    ev.tokens = toks;
    ev.n = k;
    ev.logits = s->req.want_logits ? logits : nullptr;
    ev.stats = &s->stats;
    go = s->cb(ev);
  }
  if (!go) why = FinishReason::kStop;  // the client ended it (e.g. a stop string completed)
  if (why != FinishReason::kNone) {
    finish(s, why);
    return false;
  }
  return true;
}

void Scheduler::admit(int32_t g) {
  KvPool& kv = target_.kv();
  std::vector<int32_t> load(groups_.size(), 0);
  for (auto& up : running_) ++load[size_t(up->group)];
  while (!waiting_.empty() && !free_slots_.empty()) {
    Seq* s = waiting_.front().get();
    const int32_t slot = free_slots_.back();
    const int32_t end = std::min(max_ctx_, s->prefill_end() + s->block + 1);
    // With nothing running, admit anyway (it can only wait for itself); preemption or the
    // budget end it when it truly cannot fit.
    if (!running_.empty()) {
      if (kv.blocks_needed(slot, end) > kv.blocks_free()) break;
      KvPool* dk = s->spec ? proposer_->kv_pool() : nullptr;
      if (dk && dk->blocks_needed(slot, end + s->block) > dk->blocks_free()) break;
    }
    free_slots_.pop_back();
    s->slot = slot;
    // The least-loaded group, the one being launched on a tie, then the lowest.
    int32_t best = g;
    for (int32_t h = 0; h < int32_t(load.size()); ++h)
      if (load[size_t(h)] < load[size_t(best)]) best = h;
    s->group = best;
    ++load[size_t(best)];
    if (!s->scheduled_once) {
      s->scheduled_once = true;
      s->stats.queue_s = since(s->t_submit);
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void Scheduler::preempt(Seq* v) {
  ++preemptions_;
  ++v->stats.preemptions;
  release_slot(v);
  v->computed = 0;
  v->decoding = false;
  v->pending_n = 0;
  auto it = std::find_if(running_.begin(), running_.end(), [&](auto& p) { return p.get() == v; });
  waiting_.push_front(std::move(*it));
  running_.erase(it);
}

// Plans this step's rows and makes room for them in both pools (preempting as needed).
bool Scheduler::plan_and_reserve(int32_t grp, std::vector<Seq*>& batch) {
  for (;;) {
    batch.clear();
    int32_t rows = 0;
    bool any_prefill = false;
    double expected = 0;  // tokens the step is expected to commit (fixed-length sequences)
    int32_t draft_rows = 0;  // drafter rows of the fixed-length sequences
    auto_seqs_.clear();
    auto_caps_.clear();
    int32_t n_decoding = 0;
    for (auto& up : running_) n_decoding += up->group == grp && up->decoding;
    for (auto& up : running_) {
      Seq* s = up.get();
      if (s->group != grp) continue;
      s->seg = -1;
      if (!s->decoding) continue;
      int32_t nd = 0;
      if (s->spec) {
        const int32_t cap = std::max(0, std::min({s->block - 1, s->budget - s->generated - 1,
                                                  max_ctx_ - s->s() - 1}));
        // Warm-up cycles (full blocks, to observe every position) only pay when the sequence
        // decodes alone; in a batch the acceptance prior stands in for them.
        if (s->auto_block && (n_decoding > 1 || !s->policy->warming_up())) {
          auto_seqs_.push_back(s);  // chosen below, with the whole step in view
          auto_caps_.push_back(cap);
        } else {
          nd = cap;
          expected += s->policy ? s->policy->expected_committed(nd) - 1.0 : 0.0;
          draft_rows += nd ? nd + 1 : 0;
        }
      }
      expected += 1.0;
      s->n_draft = nd;
      s->draft.tokens.clear();
      s->draft.probs.clear();
      rows += nd + 1;
      batch.push_back(s);
    }
    for (auto& up : running_) {
      Seq* s = up.get();
      if (s->group != grp || s->decoding) continue;
      const int32_t n = s->next_chunk_end(opts_.prefill_chunk) - s->computed;
      if (any_prefill && rows + n > opts_.max_batch_tokens) continue;
      any_prefill = true;
      rows += n;
      if (s->next_chunk_end(opts_.prefill_chunk) == s->prefill_end() && !s->generated) expected += 1.0;
      s->n_draft = 0;
      batch.push_back(s);
    }
    // Auto draft lengths from the step's cost curve (BlockPolicy's batch form).
    if (!auto_seqs_.empty()) {
      auto_pol_.clear();
      for (Seq* s : auto_seqs_) auto_pol_.push_back(s->policy.get());
      StepCost cost;
      cost.target = &opts_.verify_cost;
      cost.draft = &opts_.draft_cost;
      cost.target_rows = rows;
      cost.draft_rows = draft_rows;
      choose_batch_draft_lengths(auto_pol_, auto_caps_, expected, cost, auto_len_);
      for (size_t i = 0; i < auto_seqs_.size(); ++i) {
        Seq* s = auto_seqs_[i];
        int32_t k = auto_len_[i];
        // Exploration: a sequence that has not drafted for a while drafts a little, so its
        // acceptance estimates keep learning (they are what decides; never drafting would freeze
        // them at the prior).
        if (k == 0 && ++s->steps_without_drafts >= kExploreEvery) k = std::min(auto_caps_[i], 2);
        if (k > 0) s->steps_without_drafts = 0;
        s->n_draft = k;
        rows += k;
      }
    }
    // Room in both pools.
    Seq* short_of = nullptr;
    KvPool& kv = target_.kv();
    KvPool* dk = proposer_ ? proposer_->kv_pool() : nullptr;
    for (Seq* s : batch) {
      const int32_t end = s->decoding ? s->s() + s->n_draft + 1 : s->next_chunk_end(opts_.prefill_chunk);
      if (!kv.ensure(s->slot, end)) {
        short_of = s;
        break;
      }
      if (s->spec && dk) {
        const int32_t dend = dk->length(s->slot) + s->pending_n + (s->n_draft ? s->n_draft + 1 : 0);
        if (!dk->ensure(s->slot, std::min(dend, dk->max_context()))) {
          short_of = s;
          break;
        }
      }
    }
    if (!short_of) return !batch.empty();
    // The most recently admitted sequence whose group is not in flight (this group never is).
    Seq* victim = nullptr;
    size_t candidates = 0;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it)
      if (!groups_[size_t((*it)->group)].in_flight) {
        if (!victim) victim = it->get();
        ++candidates;
      }
    if (candidates == 1) {
      // Other groups' forwards will free pages when they commit: wait for them.
      if (!in_flight_.empty()) return false;
      // Alone and still out of pages: the budget cannot hold this sequence any longer.
      finish(victim, FinishReason::kLength);
      running_.erase(std::find_if(running_.begin(), running_.end(), [&](auto& p) { return p.get() == victim; }));
      return false;
    }
    preempt(victim);
  }
}

bool Scheduler::step() {
  if (groups_.size() == 1) {
    const Launch l = launch(0);
    if (l == Launch::kIdle) return false;
    if (l == Launch::kNothing) return !idle();
    complete(0);
    return true;
  }
  // Every group not in flight starts its next step, then the oldest forward in flight ends
  // (its group starts again at the next call, while the others' forwards are still under way).
  for (int32_t g = 0; g < int32_t(groups_.size()); ++g)
    if (!groups_[size_t(g)].in_flight && launch(g) == Launch::kBegun) in_flight_.push_back(g);
  if (in_flight_.empty()) return !idle();
  const int32_t g = in_flight_.front();
  in_flight_.pop_front();
  complete(g);
  return true;
}

Scheduler::Launch Scheduler::launch(int32_t grp) {
  admit(grp);
  if (running_.empty()) return Launch::kIdle;
  Group& G = groups_[size_t(grp)];
  std::vector<Seq*>& batch = G.batch;  // reused: no allocation per step once warm
  if (!plan_and_reserve(grp, batch)) return Launch::kNothing;
  ++steps_;
  const int32_t chunk = opts_.prefill_chunk;

  // 4. One proposer pass: new context for every speculating sequence, drafts for the decoding.
  if (proposer_) {
    jobs_.clear();
    for (auto& up : running_) {
      Seq* s = up.get();
      if (s->group != grp || !s->spec) continue;
      const bool drafts = s->decoding && s->n_draft > 0;
      if (!s->pending_n && !drafts) continue;
      ProposeJob j;
      j.seq = s->slot;
      j.taps = s->pending.data();
      j.n_ctx = s->pending_n;
      j.ctx_pos0 = s->pending_pos0;
      j.anchor = s->tokens.back();
      j.anchor_pos = s->s();
      j.n_draft = drafts ? s->n_draft : 0;
      j.tokens = &s->tokens;
      j.params = &s->req.sampling;
      j.rng = &s->rng;
      j.out = &s->draft;
      jobs_.push_back(j);
    }
    const auto t_draft = Clock::now();
    if (!jobs_.empty()) proposer_->propose_batch(jobs_);
    const double draft_s = since(t_draft);
    for (auto& up : running_) {
      if (up->group != grp) continue;
      if (up->spec && (up->pending_n || (up->decoding && up->n_draft))) up->stats.draft_s += draft_s;
      up->pending_n = 0;
    }
  }

  // 5. One target forward over every segment (begun here, ended in complete()).
  ForwardBatch& fb = G.fb;
  fb.segs.clear();
  fb.group = grp;
  fb.aux = proposer_ ? &proposer_->target_aux() : nullptr;
  for (Seq* s : batch) {
    SegmentSpec g;
    g.seq = s->slot;
    if (s->decoding) {
      s->seg_tokens.assign(1, s->tokens.back());
      s->seg_tokens.insert(s->seg_tokens.end(), s->draft.tokens.begin(), s->draft.tokens.end());
      g.pos0 = s->s();
      g.logits = LogitsMode::kAll;
    } else {
      const int32_t end = s->next_chunk_end(chunk);
      s->seg_tokens.assign(s->tokens.begin() + s->computed, s->tokens.begin() + end);
      g.pos0 = s->computed;
      g.logits = (end == s->n_prompt && !s->generated) ? LogitsMode::kLast : LogitsMode::kNone;
    }
    g.tokens = s->seg_tokens.data();
    g.n = int32_t(s->seg_tokens.size());
    // A greedy request without logprobs needs only the picks (the same tokens, less head work).
    g.argmax_only = s->req.sampling.greedy() && !s->req.want_logits;
    g.taps = s->spec;
    s->seg = int32_t(fb.segs.size());
    fb.segs.push_back(g);
  }
  G.t_fwd = Clock::now();
  target_.forward_begin(fb);
  G.in_flight = true;
  return Launch::kBegun;
}

void Scheduler::complete(int32_t grp) {
  Group& G = groups_[size_t(grp)];
  const ForwardBatch& fb = G.fb;
  BatchOut& bo = G.bo;
  target_.forward_end(fb, bo);
  G.in_flight = false;
  const double fwd_s = since(G.t_fwd);
  const int64_t V = vocab_;
  const size_t row_w = fb.aux ? fb.aux->size() * size_t(hidden_) : 0;

  // 6. Verify, commit, roll back, report.
  for (Seq* s : G.batch) {
    if (s->cancelled) {
      finish(s, FinishReason::kCancelled);
      continue;
    }
    const SegmentSpec& g = fb.segs[size_t(s->seg)];
    const float* taps = row_w ? bo.aux_of(size_t(s->seg), int64_t(row_w)) : nullptr;
    auto keep_taps = [&](int32_t n, int32_t pos0) {
      if (!s->spec) return;
      if (!s->pending_n) s->pending_pos0 = pos0;
      s->pending.resize(size_t(s->pending_n + n) * row_w);
      std::copy_n(taps, size_t(n) * row_w, s->pending.begin() + size_t(s->pending_n) * row_w);
      s->pending_n += n;
    };
    if (!s->decoding) {
      keep_taps(g.n, g.pos0);
      s->computed = g.pos0 + g.n;
      if (s->computed < s->prefill_end()) continue;
      s->decoding = true;
      if (s->generated) continue;  // resumed after a preemption: the anchor is known
      const float* logits = g.argmax_only ? nullptr : bo.logits_of(size_t(s->seg), V);
      const int32_t tok = g.argmax_only ? bo.argmax_of(size_t(s->seg))[0]
                                        : sample_token(logits, V, s->req.sampling, s->rng, scratch_);
      emit(s, &tok, 1, logits);
      continue;
    }
    // Either the rows' logits, or (argmax_only) their greedy picks.
    const float* logits = g.argmax_only ? nullptr : bo.logits_of(size_t(s->seg), V);
    const int32_t* picks = g.argmax_only ? bo.argmax_of(size_t(s->seg)) : nullptr;
    const int32_t nd = int32_t(s->draft.tokens.size());
    const int32_t s0 = s->s();
    ++s->stats.target_passes;
    s->stats.verify_s += fwd_s;
    if (s->spec) ++s->stats.draft_length_histogram[size_t(nd)];
    if (!s->spec) {
      const int32_t tok = picks ? picks[0] : sample_token(logits, V, s->req.sampling, s->rng, scratch_);
      s->computed = s0 + 1;
      emit(s, &tok, 1, logits);
      continue;
    }
    const VerifyResult vr =
        picks ? verify_greedy_picks(s->draft.tokens.data(), nd, picks)
        : s->req.sampling.greedy()
            ? verify_greedy(s->draft.tokens.data(), nd, logits, V)
            : verify_rejection(s->draft.tokens.data(), nd, logits, s->draft.probs.data(), V,
                               s->req.sampling, s->rng);
    if (nd > 0) {
      RequestStats& st = s->stats;
      ++st.draft_steps;
      st.drafted_tokens += nd;
      st.accepted_tokens += vr.n_accepted;
      st.committed_in_cycles += vr.n_accepted + 1;
      ++st.acceptance_histogram[size_t(vr.n_accepted)];
      for (int32_t j = 0; j < vr.n_accepted; ++j) ++st.accepted_per_position[size_t(j)];
      if (s->req.trace) s->trace.push_back({s->draft.tokens, vr.n_accepted});
      if (s->policy) s->policy->observe(nd, vr.n_accepted);
    }
    // Keep anchor + accepted drafts in the target KV; their taps go to the proposer next step.
    target_.rollback(s->slot, s0 + vr.n_accepted + 1);
    s->computed = s0 + vr.n_accepted + 1;
    keep_taps(vr.n_accepted + 1, s0);
    std::vector<int32_t>& commit = s->seg_tokens;  // reuse: accepted drafts + the target's token
    commit.assign(s->draft.tokens.begin(), s->draft.tokens.begin() + vr.n_accepted);
    commit.push_back(vr.next_token);
    emit(s, commit.data(), int32_t(commit.size()), logits);
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](auto& p) { return p->finished; }),
                 running_.end());
}

}  // namespace dfl
