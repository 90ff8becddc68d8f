#include "core/cpu_features.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace dfl {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  f.intel = b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;  // "Genu" "ineI" "ntel"
  __cpuid(1, a, b, c, d);
  const bool osxsave = (c >> 27) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  const bool avx = (c >> 28) & 1;
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  f.os_avx = avx && (xcr0 & 0x6) == 0x6;              // XMM + YMM state
  f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;    // opmask + ZMM state
  f.os_amx = (xcr0 & 0x60000) == 0x60000;              // XTILECFG + XTILEDATA
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = (b >> 5) & 1;
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512vnni = (c >> 11) & 1;
    f.avx512fp16 = (d >> 23) & 1;
    f.amx_bf16 = (d >> 22) & 1;
    f.amx_tile = (d >> 24) & 1;
    f.amx_int8 = (d >> 25) & 1;
    __cpuid_count(7, 1, a, b, c, d);
    f.avx_vnni = (a >> 4) & 1;
    f.avx512bf16 = (a >> 5) & 1;
  }
  if (!f.os_avx) f.avx2 = f.fma = f.f16c = f.avx_vnni = false;
  if (!f.os_avx512)
    f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = f.avx512bf16 = f.avx512vnni =
        f.avx512fp16 = false;
#endif
  return f;
}

IsaLevel detect_max() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.fma && f.f16c)
    return IsaLevel::kAvx512;
  if (f.avx2 && f.fma && f.f16c) return IsaLevel::kAvx2;
  return IsaLevel::kScalar;
}

IsaLevel env_limit() {
  const char* s = std::getenv("DFL_ISA");
  if (!s) return IsaLevel::kAvx512;
  if (!std::strcmp(s, "scalar")) return IsaLevel::kScalar;
  if (!std::strcmp(s, "avx2")) return IsaLevel::kAvx2;
  return IsaLevel::kAvx512;
}

IsaLevel min_level(IsaLevel a, IsaLevel b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

IsaLevel g_limit = IsaLevel::kAvx512;
bool g_amx_on = true;
bool g_avx512_vnni_on = [] {
  const char* s = std::getenv("DFL_AVX512_VNNI");
  return !(s && !std::strcmp(s, "0"));
}();
bool g_avx_vnni_on = [] {
  const char* s = std::getenv("DFL_AVX_VNNI");
  return !(s && !std::strcmp(s, "0"));
}();
bool g_avx512_bf16_on = [] {
  const char* s = std::getenv("DFL_AVX512_BF16");
  return !(s && !std::strcmp(s, "0"));
}();

bool amx_permitted() {
  const CpuFeatures& f = cpu_features();
  if (!(f.amx_tile && f.amx_bf16 && f.os_amx)) return false;
  const char* s = std::getenv("DFL_AMX");
  if (s && !std::strcmp(s, "0")) return false;
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

IsaLevel cpu_isa_max() {
  static const IsaLevel m = detect_max();
  return m;
}

IsaLevel cpu_isa() {
  static const IsaLevel env = env_limit();
  return min_level(min_level(cpu_isa_max(), env), g_limit);
}

void set_cpu_isa_limit(IsaLevel level) { g_limit = level; }

bool amx_usable() {
  static const bool permitted = amx_permitted();
  return permitted && g_amx_on && avx512_bf16_usable() && avx512_vnni_usable();
}

void set_amx_enabled(bool on) { g_amx_on = on; }

bool avx512_bf16_usable() {
  return cpu_features().avx512bf16 && g_avx512_bf16_on && cpu_isa() == IsaLevel::kAvx512;
}

void set_avx512_bf16_enabled(bool on) { g_avx512_bf16_on = on; }

bool avx512_vnni_usable() {
  return cpu_features().avx512vnni && g_avx512_vnni_on && cpu_isa() == IsaLevel::kAvx512;
}

void set_avx512_vnni_enabled(bool on) { g_avx512_vnni_on = on; }

IsaLevel int8_isa() {
  const IsaLevel isa = cpu_isa();
  return isa == IsaLevel::kAvx512 && !avx512_vnni_usable() ? IsaLevel::kAvx2 : isa;
}

bool avx_vnni_usable() {
  return cpu_features().avx_vnni && g_avx_vnni_on && int8_isa() == IsaLevel::kAvx2;
}

void set_avx_vnni_enabled(bool on) { g_avx_vnni_on = on; }

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar: return "scalar";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
  }
  return "?";
}

}  // namespace dfl
