// The AVX2 GGUF kernels of ggml_avx2.cc compiled a second time with AVX-VNNI (cmake/isa.cmake
// `avxvnni`): namespace avx2_vnni, whose matmul_q32x16 / q4k16 / q6k16 take the integer dots
// of the packed layouts from vpdpbusd ymm (one instruction where AVX2 needs vpmaddubsw,
// vpmaddwd and an add). Called only where avx_vnni_usable() (core/cpu_features.h).
#define DFL_AVX2_VNNI 1
#include "kernels/cpu/ggml_avx2.cc"
