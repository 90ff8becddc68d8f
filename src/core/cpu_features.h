// CPU feature detection (CPUID + XGETBV) and the ISA level the kernels dispatch on.
//
// The binary targets baseline x86-64; SIMD kernels live in files compiled with per-file ISA
// flags (cmake/isa.cmake) and are only called when cpu_isa() says the machine runs them.
// cpu_isa() can be lowered (never raised above what the CPU has) with the environment variable
// DFL_ISA=scalar|avx2|avx512 or set_cpu_isa_limit() — tests use that to check every path on one
// machine.
#pragma once

namespace dfl {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512bf16 = false, avx512vnni = false, avx512fp16 = false;
  bool avx_vnni = false, amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool os_avx = false, os_avx512 = false, os_amx = false;  // XCR0 enables the register state
  bool intel = false;                                        // vendor "GenuineIntel"
};

enum class IsaLevel : int {
  kScalar = 0,  // portable C++ (kernels/ops.cc)
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512 F/BW/DQ/VL (Skylake-SP and later, Zen 4/5); VNNI, BF16 and AMX are
                //   used only where avx512_vnni_usable(), avx512_bf16_usable(), amx_usable()
};

// Detected once, cached.
const CpuFeatures& cpu_features();
// The best level the CPU supports.
IsaLevel cpu_isa_max();
// The level kernels use now: min(cpu_isa_max(), DFL_ISA env, set_cpu_isa_limit()).
IsaLevel cpu_isa();
// Caps cpu_isa() (tests, benchmarks). Not thread-safe against running kernels.
void set_cpu_isa_limit(IsaLevel level);
const char* isa_name(IsaLevel level);

// AMX tiles (BF16) usable by this process: CPU + OS support, the Linux permission request
// (arch_prctl ARCH_REQ_XCOMP_PERM) granted, avx512_bf16_usable() and avx512_vnni_usable(), not
// disabled by DFL_AMX=0 or set_amx_enabled(false). Used for BF16 weights prepacked by
// prepack_weight().
bool amx_usable();
void set_amx_enabled(bool on);

// The AVX-512 BF16 instructions (vdpbf16ps, vcvtne2ps2bf16, vcvtneps2bf16) usable: the CPU has
// them, cpu_isa() == kAvx512, and they are not disabled by DFL_AVX512_BF16=0 or
// set_avx512_bf16_enabled(false). Without them (Cascade Lake, Ice Lake, Tiger Lake) the AVX-512
// kernels compute the same bits with fp32 FMA and integer rounding (ops.h Bf16Dot::kFma,
// cpu/simd_avx512.h's bf16 conversions); disabling them here is how one machine tests that.
// Not thread-safe against running kernels.
bool avx512_bf16_usable();
void set_avx512_bf16_enabled(bool on);

// AVX-512 VNNI (vpdpbusd on zmm) usable: the CPU has it (Cascade Lake and later, Zen 4/5),
// cpu_isa() == kAvx512, not disabled by DFL_AVX512_VNNI=0 or set_avx512_vnni_enabled(false).
// The AVX-512 integer kernels (GGUF blocks, Q8, the head screens' planes) need it; without it
// (Skylake-SP / Skylake-X) they run at the AVX2 level: int8_isa(). Everything else stays
// AVX-512. Not thread-safe against running kernels.
bool avx512_vnni_usable();
void set_avx512_vnni_enabled(bool on);
// The level of the int8 kernels: cpu_isa(), but kAvx2 where AVX-512 has no usable VNNI. Their
// results are the same bits on every level.
IsaLevel int8_isa();

// AVX-VNNI (vpdpbusd on ymm, VEX-encoded) usable by the AVX2 integer kernels: the CPU has it
// (Alder Lake and later Intel cores, Sierra Forest, Zen 5), int8_isa() == kAvx2, not disabled
// by DFL_AVX_VNNI=0 or set_avx_vnni_enabled(false). The AVX2 GGUF and Q8 kernels of the packed
// layouts then take their integer dots from it (the same exact integers, so the same bits).
// Not thread-safe against running kernels.
bool avx_vnni_usable();
void set_avx_vnni_enabled(bool on);

}  // namespace dfl
