// The namespace of an AVX2 kernel file that is compiled twice (cpu/ggml_avx2.cc, cpu/q8_avx2.cc):
// as itself, avx2; included by its *_avxvnni.cc twin with DFL_AVX2_VNNI = 1 (and the AVX-VNNI
// flag), avx2_vnni — so the two copies of every function are distinct symbols.
#pragma once

#ifndef DFL_AVX2_VNNI
#define DFL_AVX2_VNNI 0
#endif

#if DFL_AVX2_VNNI
#define DFL_AVX2_NAMESPACE avx2_vnni
#else
#define DFL_AVX2_NAMESPACE avx2
#endif
