# Per-file ISA flags for runtime-dispatched SIMD kernels. The binary itself targets baseline
# x86-64; files listed with dfl_isa_sources() get the flags of one ISA level and are only
# called after a CPUID check (src/core/cpu_features.h).
function(dfl_isa_sources isa)
  if(isa STREQUAL "avx2")
    set(flags "-mavx2 -mfma -mf16c")
  elseif(isa STREQUAL "avxvnni")
    set(flags "-mavx2 -mfma -mf16c -mavxvnni")
  elseif(isa STREQUAL "avx512")
    # No -mavx512vnni: only the int8 files (avx512vnni below) may hold vpdpbusd, so the
    # compiler cannot put one where a Skylake-SP (AVX-512 without VNNI) runs.
    set(flags "-mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mfma -mf16c")
  elseif(isa STREQUAL "avx512vnni")
    set(flags "-mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mavx512vnni -mfma -mf16c")
  elseif(isa STREQUAL "amx")
    set(flags "-mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mavx512vnni -mfma -mf16c -mamx-tile -mamx-bf16 -mamx-int8")
  else()
    message(FATAL_ERROR "unknown isa ${isa}")
  endif()
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_FLAGS "${flags}")
endfunction()
