// Prometheus text exposition (format 0.0.4) with vLLM's metric names under the prefix "dflash:"
// (a vLLM dashboard needs only the prefix changed), every series labelled model_name="<served>".
//
//   gauges      dflash:num_requests_running, dflash:num_requests_waiting,
//               dflash:kv_cache_usage_perc (fraction in [0, 1], as vLLM)
//   counters    dflash:prompt_tokens_total, dflash:generation_tokens_total,
//               dflash:spec_decode_num_drafts_total, dflash:spec_decode_num_draft_tokens_total,
//               dflash:spec_decode_num_accepted_tokens_total,
//               dflash:spec_decode_num_accepted_tokens_per_pos_total{position="i"},
//               dflash:num_preemptions_total,
//               dflash:request_success_total{finished_reason="stop"|"length"|"abort"|"error"}
//   histograms  dflash:time_to_first_token_seconds, dflash:inter_token_latency_seconds,
//               dflash:e2e_request_latency_seconds (vLLM's buckets)
// The engine counters come from the last dfl::EngineMetrics snapshot; the histograms and
// request_success from per-request observations. Thread-safe: the engine thread feeds it, the
// /metrics handler renders it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace dfl::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v, int64_t times = 1);
  // Appends the _bucket / _sum / _count lines of `name` with `labels` ("k=\"v\"" list).
  void render(const std::string& name, const std::string& labels, std::string& out) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(const std::string& model_name);

  void set_engine(const EngineMetrics& m);
  // A request's first token arrived `ttft_s` after submit.
  void observe_ttft(double ttft_s);
  // `n` tokens arrived together `gap_s` after the previous ones (each counts gap_s / n).
  void observe_token_gap(double gap_s, int64_t n);
  // A request finished: e2e latency and request_success_total{finished_reason}.
  void observe_finished(double e2e_s, const std::string& finished_reason);

  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::string labels_;  // model_name="…"
  EngineMetrics engine_;
  Histogram ttft_, itl_, e2e_;
  std::map<std::string, int64_t> finished_;
};

// A Prometheus label value with \, " and newline escaped.
std::string prometheus_escape(const std::string& v);

}  // namespace dfl::server
