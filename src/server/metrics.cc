#include "server/metrics.h"

#include <cstdio>
#include <cstdlib>

namespace dfl::server {

namespace {

// Shortest of %.15g / %.17g that reads back exactly (0.04, not 0.040000000000000001).
std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name + "{" + labels + "} " + num(v) + "\n";
}

}  // namespace

std::string prometheus_escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

Histogram::Histogram(std::vector<double> b) : bounds_(std::move(b)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v, int64_t times) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i] += times;
  sum_ += v * double(times);
  count_ += times;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string& out) const {
  int64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_sum{" + labels + "} " + num(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics(const std::string& model_name)
    : labels_("model_name=\"" + prometheus_escape(model_name) + "\""),
      // vLLM's buckets (vllm/v1/metrics/loggers.py).
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
             10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
            20.0, 40.0, 80.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
            240.0, 480.0, 960.0, 1920.0, 7680.0}) {
  for (const char* r : {"stop", "length", "abort", "error"}) finished_[r] = 0;
}

void ServerMetrics::set_engine(const EngineMetrics& m) {
  std::lock_guard<std::mutex> lk(mu_);
  engine_ = m;
}

void ServerMetrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  ttft_.observe(s);
}

void ServerMetrics::observe_token_gap(double gap_s, int64_t n) {
  if (n <= 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  itl_.observe(gap_s / double(n), n);
}

void ServerMetrics::observe_finished(double e2e_s, const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  e2e_.observe(e2e_s);
  ++finished_[reason];
}

std::string ServerMetrics::render() const {
  std::lock_guard<std::mutex> lk(mu_);
  const EngineMetrics& e = engine_;
  const std::string& L = labels_;
  std::string o;
  auto gauge = [&](const char* n, const char* help, double v) {
    const std::string name = std::string("dflash:") + n;
    header(o, name, "gauge", help);
    sample(o, name, L, v);
  };
  auto counter = [&](const char* n, const char* help, double v) {
    const std::string name = std::string("dflash:") + n;
    header(o, name, "counter", help);
    sample(o, name, L, v);
  };
  gauge("num_requests_running", "Number of requests in model execution batches.", e.running);
  gauge("num_requests_waiting", "Number of requests waiting to be processed.", e.waiting);
  gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", e.kv_usage);
  counter("prompt_tokens_total", "Number of prefill tokens processed.", double(e.prompt_tokens_total));
  counter("generation_tokens_total", "Number of generation tokens processed.",
          double(e.generation_tokens_total));
  counter("spec_decode_num_drafts_total", "Number of spec decoding drafts.", double(e.spec_drafts_total));
  counter("spec_decode_num_draft_tokens_total", "Number of draft tokens.",
          double(e.spec_draft_tokens_total));
  counter("spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
          double(e.spec_accepted_tokens_total));
  {
    const std::string name = "dflash:spec_decode_num_accepted_tokens_per_pos_total";
    header(o, name, "counter", "Accepted tokens per draft position.");
    for (size_t i = 0; i < e.spec_accepted_per_pos_total.size(); ++i)
      sample(o, name, L + ",position=\"" + std::to_string(i) + "\"",
             double(e.spec_accepted_per_pos_total[i]));
  }
  counter("num_preemptions_total", "Cumulative number of preemptions.", double(e.preemptions_total));
  {
    const std::string name = "dflash:request_success_total";
    header(o, name, "counter", "Count of finished requests by finish reason.");
    for (const auto& [reason, n] : finished_)
      sample(o, name, L + ",finished_reason=\"" + prometheus_escape(reason) + "\"", double(n));
  }
  header(o, "dflash:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.");
  ttft_.render("dflash:time_to_first_token_seconds", L, o);
  header(o, "dflash:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.");
  itl_.render("dflash:inter_token_latency_seconds", L, o);
  header(o, "dflash:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.");
  e2e_.render("dflash:e2e_request_latency_seconds", L, o);
  return o;
}

}  // namespace dfl::server
