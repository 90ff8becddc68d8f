// Fuzzes config.json parsing (all families + the DFlash per-layer attention resolution) and the
// derived KV layout. Any input must either parse or throw dfl::Error — never crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "model/config.h"
#include "model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    dfl::ModelConfig c = dfl::parse_model_config(text, "fuzz");
    (void)dfl::kv_bytes_per_sequence(dfl::kv_layout(c), 4096, 16);
  } catch (const dfl::Error&) {
  }
  return 0;
}
