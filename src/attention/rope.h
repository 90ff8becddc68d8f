// RoPE frequency tables (default, linear, YaRN, llama3, proportional — same formulas as HF
// transformers' modeling_rope_utils) and cos/sin for a list of positions.
#pragma once

#include <cstdint>
#include <vector>

#include <optional>
#include <string>

namespace dfl {

// RoPE of one layer: NeoX (rotate-half) pairs (i, i + n_rot/2) over the leading n_rot dims.
struct RopeSpec {
  float theta = 10000.0f;
  int32_t n_rot = 0;                 // rotated dims per head (int(head_dim × partial_rotary_factor))
  std::string type = "default";      // "default" | "yarn" | "linear" | "llama3" | "proportional"
  // proportional (Gemma 4 global layers): n_rot = head_dim, frequency i = theta^(-2i/head_dim)
  // for i < n_angles (= int(partial_rotary_factor·head_dim/2)) and 0 beyond (those pairs stay
  // unrotated), all divided by factor.
  int32_t n_angles = 0;
  float factor = 1.0f;               // yarn / linear / llama3 scaling factor
  int32_t original_max_position = 0; // yarn, llama3
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f;  // llama3
  float beta_fast = 32.0f, beta_slow = 1.0f;
  std::optional<float> attention_factor, mscale, mscale_all_dim;
  bool truncate = true;
  bool operator==(const RopeSpec&) const = default;
};


class RopeTable {
 public:
  RopeTable() = default;
  // `theta_override` > 0 replaces spec.theta (e.g. the drafter's backbone_rotary_base for context keys).
  explicit RopeTable(const RopeSpec& spec, float theta_override = 0.0f);

  int32_t n_rot() const { return n_rot_; }
  float attention_factor() const { return attention_factor_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

  // cos, sin: [n, n_rot/2] for positions pos[0..n), scaled by attention_factor (YaRN mscale).
  void fill(const int32_t* pos, int64_t n, float* cos, float* sin) const;

 private:
  int32_t n_rot_ = 0;
  float attention_factor_ = 1.0f;
  std::vector<float> inv_freq_;  // [n_rot/2]
};

}  // namespace dfl
