// The AVX2 Q8 kernel of q8_avx2.cc compiled a second time with AVX-VNNI (cmake/isa.cmake
// `avxvnni`): namespace avx2_vnni, whose matmul_q8 takes each block dot from vpdpbusd ymm.
// Called only where avx_vnni_usable() (core/cpu_features.h).
#define DFL_AVX2_VNNI 1
#include "kernels/cpu/q8_avx2.cc"
