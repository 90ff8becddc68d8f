// f16_to_f32 on all 65,536 half bit patterns against the CPU's own conversion (F16C
// vcvtph2ps), an oracle independent of our bit arithmetic.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace {

__attribute__((target("f16c"))) float hardware_f16(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

TEST(Dtype, F16ToF32MatchesHardwareOnEveryPattern) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C to compare against";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = dfl::f16_to_f32(static_cast<uint16_t>(h));
    const float hw = hardware_f16(static_cast<uint16_t>(h));
    if (std::isnan(hw)) {  // NaN payloads need not match; NaN-ness and sign must
      ASSERT_TRUE(std::isnan(ours)) << std::hex << h;
      ASSERT_EQ(std::signbit(ours), std::signbit(hw)) << std::hex << h;
    } else {
      ASSERT_EQ(bits_of(ours), bits_of(hw)) << std::hex << h;  // ±0, subnormals, ±inf exact
    }
  }
}

}  // namespace
