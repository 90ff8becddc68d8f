// Small helpers of `dflash bench` (cmd_bench.cc): list flags, rates, timestamps, and the
// replayed acceptance lengths of the projected (--assume-tau) mode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_machine.h"

namespace dfl::cli {

// "a,b,c" → numbers / positive integers; a clear error names `flag` otherwise.
std::vector<double> parse_list(const std::string& s, const char* flag);
std::vector<int32_t> parse_ints(const std::string& s, const char* flag);
// Rate statistic of `work` units done in the timed seconds t.
Stat rate(const Stat& t, double work);
// n reproducible token ids below min(vocab, 150000).
std::vector<int32_t> random_tokens(int32_t n, int32_t vocab, uint64_t seed);
// Latent acceptance lengths (0..D drafts) whose replayed mean is τ − 1; see bench_util.cc.
std::vector<int32_t> replay_lengths(double tau, int32_t D, double* alpha_out);
// printf of one number; the UTC minute; /proc/loadavg's three figures.
std::string fmt(const char* f, double v);
std::string now_utc();
std::string loadavg();

}  // namespace dfl::cli
