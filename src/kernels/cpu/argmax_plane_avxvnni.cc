// The AVX2 plane kernel of argmax_plane_avx2.cc compiled a second time with AVX-VNNI (cmake/isa.cmake
// `avxvnni`): namespace avx2_vnni, whose q8_0_plane_tiles takes its integer dots from vpdpbusd
// ymm (the same integers, so the same bits). Called only where avx_vnni_usable().
#define DFL_AVX2_VNNI 1
#include "kernels/cpu/argmax_plane_avx2.cc"
