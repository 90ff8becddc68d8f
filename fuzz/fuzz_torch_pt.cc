// libFuzzer harness for the torch .pt reader (src/io/torch_pickle.h). The first byte picks the
// layer under test:
//   even: the rest is a whole .pt zip archive (libzip + archive layout + pickle VM);
//   odd:  the rest is a data.pkl stream fed straight to the pickle VM, with storages served from
//         a synthetic loader (most coverage lives here: libzip itself is not instrumented).
// Every input must either load or throw dfl::Error: never crash, hang, leak or run away in memory.
// fuzz-libs: dfl_io dfl_core
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/torch_pickle.h"

namespace {

// Storage "key" → bytes: size derived from the key so tensors of various sizes can be built.
std::string fake_storage(void*, const std::string& key, uint64_t max_bytes) {
  uint64_t n = 0;
  for (char c : key) n = n * 31 + static_cast<uint8_t>(c);
  n %= 4097;
  if (n > max_bytes) throw dfl::Error("storage over limit");
  std::string s(n, '\0');
  for (uint64_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + 3);
  return s;
}

// Touch the whole tree, so values must be well-formed.
uint64_t walk(const dfl::PtValue& v) {
  uint64_t h = static_cast<uint64_t>(v.kind) + v.s.size() + static_cast<uint64_t>(v.i);
  for (const auto& c : v.items) h += walk(c);
  for (const auto& [k, x] : v.dict) h += walk(k) + walk(x);
  if (v.tensor) {
    if (v.tensor->data.size() !=
        dfl::dtype_size(v.tensor->dtype) * static_cast<uint64_t>(v.tensor->numel()))
      __builtin_trap();
    for (float f : v.tensor->to_f32()) h += f == f;
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  dfl::PtReadLimits limits;
  limits.max_pickle_bytes = 1 << 20;
  limits.max_total_tensor_bytes = 4 << 20;
  limits.max_objects = 1 << 16;
  try {
    dfl::PtValue v;
    if (data[0] & 1) {
      const std::string_view pkl(reinterpret_cast<const char*>(data + 1), size - 1);
      v = dfl::unpickle_torch(pkl, "fuzz.pkl", &fake_storage, nullptr, limits);
    } else {
      v = dfl::read_torch_bytes(data + 1, size - 1, "fuzz.pt", limits);
    }
    volatile uint64_t sink = walk(v);
    (void)sink;
  } catch (const dfl::Error&) {
  }
  return 0;
}
