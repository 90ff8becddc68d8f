// libFuzzer harness for the GGUF parser (src/io/gguf.h). Any input must either parse into
// metadata and tensors whose views lie inside the input, or throw dfl::Error.
// fuzz-libs: dfl_io dfl_core
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/gguf.h"

namespace {
bool inside(const void* p, size_t n, const uint8_t* data, size_t size) {
  const auto* b = static_cast<const uint8_t*>(p);
  return n == 0 || (b >= data && n <= size && b - data <= static_cast<ptrdiff_t>(size - n));
}

void touch(const dfl::GgufValue& v, const uint8_t* data, size_t size, volatile uint8_t& sink) {
  if (!v.str.empty()) {
    if (!inside(v.str.data(), v.str.size(), data, size)) __builtin_trap();
    sink = sink ^ static_cast<uint8_t>(v.str.front()) ^ static_cast<uint8_t>(v.str.back());
  }
  for (const auto& s : v.strs) {
    if (!inside(s.data(), s.size(), data, size)) __builtin_trap();
    if (!s.empty()) sink = sink ^ static_cast<uint8_t>(s.back());
  }
  if (v.raw && v.count) {
    (void)v.array_f64(0);
    (void)v.array_f64(v.count - 1);
  }
  for (const auto& it : v.items) touch(it, data, size, sink);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const dfl::GgufHeader h = dfl::parse_gguf(data, size, "fuzz");
    volatile uint8_t sink = 0;
    for (const auto& [k, v] : h.kv) touch(v, data, size, sink);
    for (const auto& t : h.tensors) {
      if (t.nbytes == 0) continue;
      if (!inside(t.data, t.nbytes, data, size)) __builtin_trap();
      sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
      const uint64_t n = static_cast<uint64_t>(t.numel());
      if (t.nbytes != n / t.type->block_elems * t.type->block_bytes) __builtin_trap();
    }
    (void)sink;
  } catch (const dfl::Error&) {
  }
  return 0;
}
