// libFuzzer entry point: the input bytes are a Jinja template, compiled and rendered with a fixed
// conversation the way a chat template is. Any dfl::Error (syntax or runtime) is an expected
// outcome; crashes, hangs, sanitizer reports and other exceptions are bugs.
#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/jinja.h"
#include "chat/value.h"
#include "core/error.h"

namespace {

const dfl::jinja::Value& context() {
  static const dfl::jinja::Value ctx =
      dfl::jinja::Value::from_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi <b>there</b> \u00e9\ud83d\ude42"},
      {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!", "reasoning_content": "hmm",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": [1.5, null]}}}]},
      {"role": "tool", "content": "{\"ok\": true}"},
      {"role": "user", "content": ["text", {"type": "image"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true,
    "enable_thinking": false,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })"));
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  std::string src(reinterpret_cast<const char*>(data), size);
  dfl::jinja::RenderLimits limits;
  limits.max_steps = 200000;
  limits.max_output_bytes = 1 << 20;
  limits.max_call_depth = 32;
  try {
    dfl::jinja::Template t(src);
    t.render(context(), limits);
  } catch (const dfl::Error&) {
  }
  return 0;
}
