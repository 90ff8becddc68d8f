#include "attention/rope.h"

#include <algorithm>
#include <cmath>

namespace dfl {

namespace {
// HF computes these in float32 tensors; do the same so angles agree to the last bit or two.
// pos_freqs[i] = base ** (2i / dim), as torch computes it in float32.
std::vector<float> pos_freqs(float base, int32_t dim) {
  std::vector<float> f(dim / 2);
  for (int32_t i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[i] = std::pow(base, e);
  }
  return f;
}

double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }
}  // namespace

RopeTable::RopeTable(const RopeSpec& s, float theta_override) : n_rot_(s.n_rot) {
  const float base = theta_override > 0 ? theta_override : s.theta;
  const int32_t dim = s.n_rot;
  const std::vector<float> pf = pos_freqs(base, dim);
  inv_freq_.resize(pf.size());
  for (size_t i = 0; i < pf.size(); ++i) inv_freq_[i] = 1.0f / pf[i];
  if (s.type == "llama3") {
    // HF _compute_llama3_parameters: long wavelengths divided by factor, short kept, a smooth
    // blend between (fp32 like torch).
    const float old_ctx = float(s.original_max_position);
    const float low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
    for (auto& f : inv_freq_) {
      const float wl = 2.0f * float(M_PI) / f;
      float llama = wl > low_wl ? f / s.factor : f;
      const float smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      const float smoothed = (1.0f - smooth) * llama / s.factor + smooth * llama;
      if (!(wl < high_wl) && !(wl > low_wl)) llama = smoothed;
      f = llama;
    }
  } else if (s.type == "proportional") {
    for (size_t i = 0; i < inv_freq_.size(); ++i)
      inv_freq_[i] = int32_t(i) < s.n_angles ? inv_freq_[i] / s.factor : 0.0f;
  } else if (s.type == "linear") {
    for (auto& f : inv_freq_) f /= s.factor;
  } else if (s.type == "yarn") {
    const double factor = s.factor;
    if (s.attention_factor) {
      attention_factor_ = *s.attention_factor;
    } else if (s.mscale && s.mscale_all_dim && *s.mscale != 0 && *s.mscale_all_dim != 0) {
      attention_factor_ = static_cast<float>(yarn_mscale(factor, *s.mscale) / yarn_mscale(factor, *s.mscale_all_dim));
    } else {
      attention_factor_ = static_cast<float>(yarn_mscale(factor, 1.0));
    }
    auto correction_dim = [&](double rot) {
      return (dim * std::log(s.original_max_position / (rot * 2 * M_PI))) / (2 * std::log(double(base)));
    };
    double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    for (int32_t i = 0; i < dim / 2; ++i) {
      // ramp in float32 like torch: (arange - min) / (max - min), clamped to [0, 1]
      float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
      ramp = std::clamp(ramp, 0.0f, 1.0f);
      const float extrap_factor = 1.0f - ramp;
      const float pos_freq = pf[i];
      const float extrap = 1.0f / pos_freq;
      const float interp = 1.0f / (static_cast<float>(factor) * pos_freq);
      inv_freq_[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
    }
  }
}

void RopeTable::fill(const int32_t* pos, int64_t n, float* cos, float* sin) const {
  const int32_t half = n_rot_ / 2;
  for (int64_t r = 0; r < n; ++r) {
    const float p = static_cast<float>(pos[r]);
    for (int32_t i = 0; i < half; ++i) {
      const float a = p * inv_freq_[i];
      cos[r * half + i] = std::cos(a) * attention_factor_;
      sin[r * half + i] = std::sin(a) * attention_factor_;
    }
  }
}

}  // namespace dfl
