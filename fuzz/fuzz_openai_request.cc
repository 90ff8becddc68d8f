// Fuzzes the OpenAI request parser (chat and completions) and the output parsers that see
// generated text (reasoning / tool calls, fed in two pieces). Any input must either parse or
// throw ApiError — never crash, hang or leak.
// fuzz-libs: dfl_server dfl_sampling dfl_core
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/chat_output.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (auto kind : {dfl::server::ApiKind::kChat, dfl::server::ApiKind::kCompletions}) {
    try {
      const dfl::server::ParsedRequest r = dfl::server::parse_openai_request(kind, text);
      (void)dfl::server::dump(r.engine.prompt.messages);
    } catch (const dfl::server::ApiError& e) {
      (void)dfl::server::dump(dfl::server::error_json(e));
    }
  }
  const size_t cut = size ? data[0] % (size + 1) : 0;
  dfl::server::ChatOutput out(true, size % 2 == 1, true, "f");
  (void)out.push(std::string_view(text).substr(0, cut));
  (void)out.push(std::string_view(text).substr(cut));
  (void)out.finish();
  return 0;
}
