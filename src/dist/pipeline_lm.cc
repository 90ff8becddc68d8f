#include "dist/pipeline_lm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "dist/stage_protocol.h"
#include "dist/stage_split.h"

namespace dfl::dist {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

DecoderLM* as_stage(CausalLM* m) {
  auto* d = dynamic_cast<DecoderLM*>(m);
  DFL_CHECK(d, "'", m->config().dir, "': this architecture cannot be split into pipeline stages");
  return d;
}

const std::vector<int32_t> kNoAux;

// What every rank keeps of the per-step counters (sent to the driver at the end).
struct RankStats {
  double bytes_sent = 0, messages = 0, busy_s = 0, wall_s = 0, wait_s = 0;
};

}  // namespace

std::vector<StageRange> plan_stages(const std::string& model_dir, const ConfigOptions& co,
                                    const PipelineOptions& po) {
  const ModelConfig cfg = load_model_config(model_dir, co);
  DFL_CHECK(po.n_stages >= 1 && po.n_stages <= cfg.n_layers, "--pipeline-parallel ", po.n_stages,
            " needs 1..", cfg.n_layers, " stages for '", model_dir, "' (one layer at least each)");
  if (!po.layer_counts.empty()) return split_from_counts(po.layer_counts, cfg.n_layers, po.n_stages);
  const auto ck = open_checkpoint(cfg);
  return split_by_bytes(weight_bytes_of(*ck, cfg), po.n_stages);
}

PipelineLM::PipelineLM(std::unique_ptr<CausalLM> stage, std::vector<StageRange> stages,
                       Communicator& comm, double timeout_s)
    : owned_(std::move(stage)), stage_(as_stage(owned_.get())), stages_(std::move(stages)),
      comm_(comm), timeout_s_(timeout_s) {
  DFL_CHECK(int32_t(stages_.size()) == comm_.size(), "pipeline: ", stages_.size(), " stages for ",
            comm_.size(), " ranks");
  DFL_CHECK(stage_->has_head(), "pipeline: the driver must hold the last stage");
}

void PipelineLM::send_all(const StepCommand& c) {
  const std::vector<int32_t> m = encode_command(c);
  for (int r = 0; r + 1 < comm_.size(); ++r)
    comm_.send(r, kTagCommand, m.data(), m.size() * sizeof(int32_t), timeout_s_);
}

void PipelineLM::attach_kv(KvPool* pool) {
  stage_->attach_kv(pool);
  remote_len_.assign(size_t(pool->max_seqs()), 0);
  trims_.clear();
  StepCommand c;
  c.op = StageOp::kAttachKv;
  c.max_seqs = pool->max_seqs();
  c.max_context = pool->max_context();
  c.slack = pool->slack();
  c.block_slots = pool->block_slots();
  c.n_blocks = pool->blocks_total();
  c.kv_dtype = int32_t(pool->dtype());
  send_all(c);
}

void PipelineLM::rollback(int32_t seq, int32_t n) {
  stage_->rollback(seq, n);
  if (seq >= 0 && size_t(seq) < remote_len_.size() && n < remote_len_[size_t(seq)]) {
    trims_.push_back({seq, n});
    remote_len_[size_t(seq)] = n;
  }
}

void PipelineLM::release(int32_t seq) {
  stage_->release(seq);
  if (seq >= 0 && size_t(seq) < remote_len_.size()) {
    trims_.push_back({seq, 0});
    remote_len_[size_t(seq)] = 0;
  }
}

CausalLM::StepBytes PipelineLM::weight_bytes_per_step() const { return stage_->weight_bytes_per_step(); }

void PipelineLM::forward(const ForwardBatch& b, BatchOut& out) {
  forward_begin(b);
  forward_end(b, out);
}

// Once a command is out the ranks only stay in step if its pass completes: any failure after
// that point ends the job (with the reason on this rank's stderr).
void PipelineLM::forward_begin(const ForwardBatch& b) {
  DFL_CHECK(!b.segs.empty(), "empty forward pass");
  try {
    begin_all(b);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash[rank %d]: %s: aborting every rank\n", comm_.rank(), e.what());
    comm_.abort(1);
  }
}

void PipelineLM::forward_end(const ForwardBatch& b, BatchOut& out) {
  try {
    end_all(b, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash[rank %d]: %s: aborting every rank\n", comm_.rank(), e.what());
    comm_.abort(1);
  }
}

void PipelineLM::begin_all(const ForwardBatch& b) {
  DFL_CHECK(!remote_len_.empty(), "pipeline: forward before attach_kv");
  DFL_CHECK(b.group >= 0 && b.group < kMaxGroups, "pipeline: micro-batch group ", b.group);
  for (const InFlight& f : in_flight_)
    DFL_CHECK(f.group != b.group, "pipeline: group ", b.group, " already has a pass in flight");
  if (steps_ == 0 && in_flight_.empty()) t_start_ = now_s();
  StepCommand c;
  c.op = StageOp::kForward;
  c.group = b.group;
  c.trims = std::move(trims_);
  trims_.clear();
  int64_t rows = 0;
  for (const SegmentSpec& g : b.segs) {
    DFL_CHECK(g.seq >= 0 && size_t(g.seq) < remote_len_.size() && g.n > 0, "pipeline: bad segment");
    int32_t& rl = remote_len_[size_t(g.seq)];
    // A caller that moved the KV directly (kv().truncate / clear: calibration) is caught up here.
    if (rl > g.pos0) c.trims.push_back({g.seq, g.pos0});
    DFL_CHECK(rl >= g.pos0, "pipeline: sequence ", g.seq, " at ", g.pos0, " but the workers hold ", rl);
    rl = g.pos0 + g.n;
    c.segs.push_back({g.seq, g.n, g.pos0, g.logits, g.taps});
    c.tokens.insert(c.tokens.end(), g.tokens, g.tokens + g.n);
    rows += g.n;
  }
  if (b.aux) c.aux = *b.aux;
  send_all(c);
  in_flight_.push_back({b.group, rows});
  max_in_flight_ = std::max<int64_t>(max_in_flight_, int64_t(in_flight_.size()));
}

void PipelineLM::end_all(const ForwardBatch& b, BatchOut& out) {
  DFL_CHECK(!in_flight_.empty() && in_flight_.front().group == b.group, "pipeline: forward_end of group ",
            b.group, " is not the oldest pass in flight");
  const int64_t rows = in_flight_.front().rows;
  in_flight_.pop_front();
  const int32_t H = config().hidden_size;
  const float* x_in = nullptr;
  if (comm_.size() > 1) {
    comm_.recv(comm_.size() - 2, activation_tag(b.group), rx_, timeout_s_);
    x_in = reinterpret_cast<const float*>(rx_.data());
    DFL_CHECK(rx_.size() % 4 == 0 && rx_.size() >= size_t(rows) * H * 4, "pipeline: activation of ",
              rx_.size(), " bytes for ", rows, " rows");
  }
  const double t0 = now_s();
  stage_->forward_stage(b, x_in, out);
  busy_s_ += now_s() - t0;
  if (x_in) {
    const auto& aux = b.aux ? *b.aux : kNoAux;
    unpack_taps(b, x_in, rx_.size() / 4, rows, H, aux.size(),
                relayed_columns(stages_, aux, comm_.size() - 2), out.aux);
  }
  ++steps_;
  rows_ += rows;
}

PipelineLM::~PipelineLM() {
  if (std::uncaught_exceptions() > 0) {
    std::fprintf(stderr, "dflash[rank %d]: the pipeline driver failed: aborting every rank\n", comm_.rank());
    comm_.abort(1);
  }
  try {
    // Passes begun but never ended (an engine destroyed mid-run): take their activations so the
    // last worker is not left waiting to send them.
    for (; !in_flight_.empty() && comm_.size() > 1; in_flight_.pop_front())
      comm_.recv(comm_.size() - 2, activation_tag(in_flight_.front().group), rx_, timeout_s_);
    StepCommand c;
    c.op = StageOp::kStop;
    send_all(c);
    const double wall = steps_ ? now_s() - t_start_ : 0.0;
    std::fprintf(stderr, "[pp] %d stages (layers %s): %lld steps, %lld rows, at most %lld in flight\n",
                 comm_.size(), stages_str(stages_).c_str(), (long long)steps_, (long long)rows_,
                 (long long)max_in_flight_);
    for (int r = 0; r < comm_.size(); ++r) {
      RankStats s;
      if (r + 1 < comm_.size()) {
        comm_.recv(r, kTagStats, rx_, timeout_s_);
        DFL_CHECK(rx_.size() == sizeof s, "pipeline: bad stats message");
        std::copy_n(rx_.data(), sizeof s, reinterpret_cast<uint8_t*>(&s));
      } else {
        s = {double(comm_.bytes_sent()), double(comm_.messages_sent()), busy_s_, wall, comm_.wait_seconds()};
      }
      std::fprintf(stderr, "[pp] rank %d: layers %d-%d, sent %.0f bytes in %.0f messages (%.1f per row), "
                   "busy %.3f s of %.3f s (idle %.1f%%)\n", r, stages_[size_t(r)].begin,
                   stages_[size_t(r)].end - 1, s.bytes_sent, s.messages,
                   rows_ ? s.bytes_sent / double(rows_) : 0.0, s.busy_s, s.wall_s,
                   s.wall_s > 0 ? 100.0 * (1.0 - s.busy_s / s.wall_s) : 0.0);
    }
    comm_.finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash[rank %d]: stopping the pipeline failed: %s\n", comm_.rank(), e.what());
    comm_.abort(1);
  }
}

std::function<std::unique_ptr<CausalLM>(const std::string&, const LoadOptions&, ThreadPool&)>
pipeline_loader(std::vector<StageRange> stages, Communicator& comm, double timeout_s) {
  return [stages, &comm, timeout_s](const std::string& dir, const LoadOptions& lo, ThreadPool& pool) {
    StepCommand c;
    c.op = StageOp::kLoad;
    c.max_context = lo.max_context;
    c.max_block = lo.max_block;
    c.weights_format = int32_t(lo.weights_format);
    c.prepack = lo.prepack ? 1 : 0;
    c.window_edge = lo.config.window_edge ? int32_t(*lo.config.window_edge) : -1;
    const std::vector<int32_t> m = encode_command(c);
    for (int r = 0; r + 1 < comm.size(); ++r)
      comm.send(r, kTagCommand, m.data(), m.size() * sizeof(int32_t), timeout_s);
    LoadOptions mine = lo;
    mine.stage = stages.back();
    return std::make_unique<PipelineLM>(load_causal_lm(dir, mine, pool), stages, comm, timeout_s);
  };
}

void run_stage_worker(const std::string& model_dir, const ConfigOptions& co,
                      const std::vector<StageRange>& stages, Communicator& comm, int32_t threads,
                      double timeout_s) {
  const int rank = comm.rank(), driver = comm.size() - 1;
  DFL_CHECK(rank < driver, "run_stage_worker on the driver rank");
  std::vector<uint8_t> rx, act;
  comm.recv(driver, kTagCommand, rx, -1);
  StepCommand c = decode_command(rx.data(), rx.size());
  DFL_CHECK(c.op == StageOp::kLoad, "pipeline: expected the load command first");
  LoadOptions lo;
  lo.max_context = c.max_context;
  lo.max_block = c.max_block;
  lo.weights_format = WeightsFormat(c.weights_format);
  lo.prepack = c.prepack != 0;
  lo.config = co;
  if (c.window_edge >= 0) lo.config.window_edge = WindowEdge(c.window_edge);
  lo.n_seqs = 1;
  lo.stage = stages[size_t(rank)];
  ThreadPool pool(threads);
  std::unique_ptr<CausalLM> owned = load_causal_lm(model_dir, lo, pool);
  DecoderLM* m = as_stage(owned.get());
  const int32_t H = m->config().hidden_size;
  std::unique_ptr<KvPool> kv;
  BatchOut out;
  std::vector<float> msg;
  RankStats st;
  double t_first = 0;
  while (true) {
    comm.recv(driver, kTagCommand, rx, -1);
    c = decode_command(rx.data(), rx.size());
    if (c.op == StageOp::kStop) break;
    if (c.op == StageOp::kAttachKv) {
      KvPoolOptions po;
      po.max_seqs = c.max_seqs;
      po.max_context = c.max_context;
      po.slack = c.slack;
      po.block_slots = c.block_slots;
      po.n_blocks = c.n_blocks;
      DFL_CHECK(c.kv_dtype == int32_t(KvDtype::kF32) || c.kv_dtype == int32_t(KvDtype::kBF16),
                "pipeline: unknown KV dtype ", c.kv_dtype);
      po.dtype = KvDtype(c.kv_dtype);
      kv = std::make_unique<KvPool>(m->kv_layers(), po);
      m->attach_kv(kv.get());
      continue;
    }
    DFL_CHECK(c.op == StageOp::kForward, "pipeline: unexpected command");
    if (t_first == 0) t_first = now_s();
    for (const SeqTrim& t : c.trims) {
      DFL_CHECK(t.seq >= 0 && t.seq < m->kv().max_seqs(), "pipeline: trim of slot ", t.seq);
      if (t.length == 0)
        m->release(t.seq);
      else if (t.length < m->kv().length(t.seq))
        m->rollback(t.seq, t.length);
    }
    const ForwardBatch b = batch_of(c);
    int64_t rows = 0;
    for (const SegmentSpec& g : b.segs) rows += g.n;
    const float* x_in = nullptr;
    if (rank > 0) {
      comm.recv(rank - 1, activation_tag(c.group), act, timeout_s);
      DFL_CHECK(act.size() % 4 == 0 && act.size() >= size_t(rows) * H * 4, "pipeline: activation of ",
                act.size(), " bytes for ", rows, " rows");
      x_in = reinterpret_cast<const float*>(act.data());
    }
    const double t0 = now_s();
    m->forward_stage(b, x_in, out);
    st.busy_s += now_s() - t0;
    const auto& aux = b.aux ? *b.aux : kNoAux;
    if (x_in) unpack_taps(b, x_in, act.size() / 4, rows, H, aux.size(), relayed_columns(stages, aux, rank - 1), out.aux);
    pack_activation(b, m->stage_output(), rows, H, out.aux, aux.size(), relayed_columns(stages, aux, rank), msg);
    comm.send(rank + 1, activation_tag(c.group), msg.data(), msg.size() * sizeof(float), timeout_s);
  }
  st.bytes_sent = double(comm.bytes_sent());
  st.messages = double(comm.messages_sent());
  st.wall_s = t_first > 0 ? now_s() - t_first : 0.0;
  st.wait_s = comm.wait_seconds();
  comm.send(driver, kTagStats, &st, sizeof st, timeout_s);
  comm.finish();
}

}  // namespace dfl::dist
