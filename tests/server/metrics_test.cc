// Prometheus exposition: vLLM's names under dflash:, valid sample lines, cumulative histograms.
#include "server/metrics.h"

#include <regex>
#include <sstream>

#include <gtest/gtest.h>

namespace dfl::server {
namespace {

// The value of the sample line that starts with `series` (name{labels}), or NaN.
double value_of(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return std::nan("");
}

TEST(ServerMetricsText, NamesAndValues) {
  ServerMetrics m("tiny \"q\"");
  EngineMetrics e;
  e.running = 2;
  e.waiting = 3;
  e.kv_usage = 0.25;
  e.prompt_tokens_total = 100;
  e.generation_tokens_total = 50;
  e.spec_drafts_total = 7;
  e.spec_draft_tokens_total = 70;
  e.spec_accepted_tokens_total = 30;
  e.spec_accepted_per_pos_total = {7, 5};
  m.set_engine(e);
  m.observe_ttft(0.03);
  m.observe_token_gap(0.2, 4);
  m.observe_finished(1.2, "stop");
  m.observe_finished(0.4, "abort");
  const std::string t = m.render();
  const std::string L = "model_name=\"tiny \\\"q\\\"\"";
  EXPECT_EQ(value_of(t, "dflash:num_requests_running{" + L + "}"), 2);
  EXPECT_EQ(value_of(t, "dflash:num_requests_waiting{" + L + "}"), 3);
  EXPECT_EQ(value_of(t, "dflash:kv_cache_usage_perc{" + L + "}"), 0.25);
  EXPECT_EQ(value_of(t, "dflash:prompt_tokens_total{" + L + "}"), 100);
  EXPECT_EQ(value_of(t, "dflash:generation_tokens_total{" + L + "}"), 50);
  EXPECT_EQ(value_of(t, "dflash:spec_decode_num_drafts_total{" + L + "}"), 7);
  EXPECT_EQ(value_of(t, "dflash:spec_decode_num_draft_tokens_total{" + L + "}"), 70);
  EXPECT_EQ(value_of(t, "dflash:spec_decode_num_accepted_tokens_total{" + L + "}"), 30);
  EXPECT_EQ(value_of(t, "dflash:spec_decode_num_accepted_tokens_per_pos_total{" + L + ",position=\"1\"}"), 5);
  EXPECT_EQ(value_of(t, "dflash:request_success_total{" + L + ",finished_reason=\"stop\"}"), 1);
  EXPECT_EQ(value_of(t, "dflash:request_success_total{" + L + ",finished_reason=\"abort\"}"), 1);
  EXPECT_EQ(value_of(t, "dflash:request_success_total{" + L + ",finished_reason=\"length\"}"), 0);
  EXPECT_EQ(value_of(t, "dflash:time_to_first_token_seconds_count{" + L + "}"), 1);
  EXPECT_EQ(value_of(t, "dflash:time_to_first_token_seconds_bucket{" + L + ",le=\"0.02\"}"), 0);
  EXPECT_EQ(value_of(t, "dflash:time_to_first_token_seconds_bucket{" + L + ",le=\"0.04\"}"), 1);
  EXPECT_EQ(value_of(t, "dflash:inter_token_latency_seconds_count{" + L + "}"), 4);
  EXPECT_NEAR(value_of(t, "dflash:inter_token_latency_seconds_sum{" + L + "}"), 0.2, 1e-12);
  EXPECT_EQ(value_of(t, "dflash:e2e_request_latency_seconds_bucket{" + L + ",le=\"+Inf\"}"), 2);
  EXPECT_EQ(value_of(t, "dflash:e2e_request_latency_seconds_bucket{" + L + ",le=\"0.5\"}"), 1);
}

TEST(ServerMetricsText, WellFormedExposition) {
  ServerMetrics m("m");
  m.observe_ttft(5);
  const std::string t = m.render();
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\} [-+0-9.eEInf]+$)");
  const std::regex meta(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  std::istringstream in(t);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    EXPECT_TRUE(std::regex_match(line, sample) || std::regex_match(line, meta)) << line;
    ++n;
  }
  EXPECT_GT(n, 50);
  // Histogram buckets are cumulative and end at the count.
  Histogram h({1, 2});
  h.observe(0.5);
  h.observe(1.5, 2);
  h.observe(9);
  std::string out;
  h.render("x", "a=\"b\"", out);
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"2\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count{a=\"b\"} 4\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace dfl::server
