// Automatic draft length (`--block-size auto`): per cycle, how many tokens k to draft (the verify
// block is then B = k + 1 with the anchor).
//
// The rule. Let α_j be the probability that draft j is accepted given drafts 1..j−1 were (the
// per-position conditional acceptance). Drafting k tokens commits, in expectation,
//     E(k) = 1 + Σ_{j≤k} Π_{i≤j} α_i            (the target's own token + the accepted prefix)
// and costs one drafter pass plus one target verify of k + 1 rows:  C(k) = t_draft(k+1) + t(k+1).
// The policy picks k ∈ [1, max_draft] maximizing tokens per second E(k) / C(k). Because
// Π α_i shrinks with k while t(k+1) grows, this stops drafting where one more token's expected
// gain (Π_{i≤k+1} α_i) no longer pays for its share of the verification cost.
//
// Acceptance estimates come from the running statistics: a cycle that drafted k and accepted a
// is a success at positions 1..a, a failure at a + 1 (if a < k) and says nothing about positions
// beyond (censored). Per position, α_j = (s_j + w·ᾱ) / (n_j + w), shrunk toward the pooled rate
// ᾱ over all positions (which itself has a Beta(1,1) prior) with prior weight w, so positions the
// policy has stopped drafting keep a sensible estimate. Counts decay by `decay` per cycle so the
// estimate follows a change of text. The first `warmup` cycles draft the full block (they observe
// every position). k never exceeds max_draft (the drafter's trained block − 1).
//
// Costs: t(B) and t_draft(B) in seconds, either given (a measured curve, e.g. by dflash bench or
// measure_verify_curve()) or learned online from the cycle timings (exponential moving average
// per B). A B never measured is interpolated linearly between measured neighbours; beyond the
// last one it is extrapolated with the slope of the nearest two (or held flat with only one).
#pragma once

#include <cstdint>
#include <vector>

namespace dfl {

struct BlockPolicyOptions {
  int32_t warmup = 4;          // cycles that draft the full block first
  double decay = 0.98;         // per-cycle forgetting factor of the acceptance counts
  double prior_weight = 2.0;   // w: pseudo-observations toward the pooled rate per position
  double cost_ema = 0.3;       // weight of a new timing in the per-B moving average (0 = off)
};

class BlockPolicy {
 public:
  explicit BlockPolicy(int32_t max_draft, BlockPolicyOptions opt = {});

  int32_t max_draft() const { return max_draft_; }

  // Measured verify cost t(B) in seconds (or any unit shared with the draft cost): t_by_b[B] for
  // B = 1..; entries ≤ 0 (and index 0) mean "unknown".
  void set_verify_cost(const std::vector<double>& t_by_b);
  void set_draft_cost(const std::vector<double>& t_by_b);
  // Online timings of one cycle with a block of B rows (anchor included).
  void observe_verify_time(int32_t B, double seconds);
  void observe_draft_time(int32_t B, double seconds);
  // Acceptance of one cycle: n_drafted tokens drafted, the first n_accepted accepted.
  void observe(int32_t n_drafted, int32_t n_accepted);

  // Per-position conditional acceptance estimates α_1..α_max_draft (index 0 = position 1).
  std::vector<double> acceptance() const;
  // E(k) with the current estimates.
  double expected_committed(int32_t k) const;
  // Cost of a cycle that drafts k: t_draft(k+1) + t(k+1) (0 when nothing is known).
  double cycle_cost(int32_t k) const;
  // The draft length for the next cycle, in [1, max_draft].
  int32_t choose() const;

  int64_t cycles() const { return cycles_; }
  // The first cycles draft the full block (they observe every position).
  bool warming_up() const { return cycles_ < opt_.warmup; }

  // The cost-curve rule (file comment): t[B] when measured, else interpolated / extrapolated.
  static double lookup(const std::vector<double>& t, int32_t B);

 private:

  int32_t max_draft_;
  BlockPolicyOptions opt_;
  std::vector<double> succ_, trials_;    // per position j = 1..max_draft (index j − 1)
  std::vector<double> verify_, draft_;   // per B = 0..max_draft+1 (≤ 0: unknown)
  int64_t cycles_ = 0;
};

// The batch form of choose(), for the auto-length sequences of one step. A step's cost is the
// target forward over all its rows, t(R) (a curve over total rows, e.g. measure_verify_curve
// up to the step budget); each sequence's expected gain from its j-th draft is Π_{i≤j} α_i
// (its own acceptance estimates). Starting from no drafts (R = base_rows, E = base_expected:
// the rows and expected tokens of everything else in the step), one more draft goes to the
// sequence whose next draft is most likely accepted, as long as the step's expected tokens per
// second grow: (E + g) / C(R + 1, D') > E / C(R, D), C = t(R) + t_draft(D). At low load (t nearly flat in R) this drafts full
// blocks; when rows cost real time (many sequences, compute-bound), drafts get shorter and
// sequences with poor acceptance stop drafting. With one sequence it is choose() without the
// draft-cost term. caps[i] bounds sequence i's drafts; out[i] gets its draft length.
// draft_cost (optional) is the proposer pass over total drafter rows D (a sequence drafting k
// adds k + 1 rows); the step then costs t(R) + t_draft(D).
struct StepCost {
  const std::vector<double>* target = nullptr;  // t(R), R = target rows
  const std::vector<double>* draft = nullptr;   // t_draft(D), D = drafter rows
  int32_t target_rows = 0, draft_rows = 0;      // of the rest of the step
  double seconds(int32_t R, int32_t D) const;
};
void choose_batch_draft_lengths(const std::vector<const BlockPolicy*>& seqs,
                                const std::vector<int32_t>& caps, double base_expected,
                                const StepCost& cost, std::vector<int32_t>& out);

}  // namespace dfl
