// libFuzzer harness for the safetensors header parser (src/io/safetensors.h). Any input must either
// parse into tensors whose byte ranges lie inside the input, or throw dfl::Error.
// fuzz-libs: dfl_io dfl_core
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const dfl::SafetensorsHeader h = dfl::parse_safetensors(data, size, "fuzz");
    // Touch the first and last byte of every tensor: ASan flags any range outside the input.
    volatile uint8_t sink = 0;
    for (const auto& t : h.tensors) {
      if (t.nbytes == 0) continue;
      if (t.data < data || t.data + t.nbytes > data + size) __builtin_trap();
      sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
      if (t.nbytes != dfl::dtype_size(t.dtype) * static_cast<uint64_t>(t.numel())) __builtin_trap();
    }
    (void)sink;
  } catch (const dfl::Error&) {
  }
  return 0;
}
