// Chat content parts that are not text. Every model dflash runs is text-only (the vision tower of
// a Qwen3.5 checkpoint is skipped at load), so a message carrying an image (or video / audio) part
// is refused with one clear message at every entry point — the server's request parser
// (400, param messages[i].content[j].type) and the engine's prompt rendering (CLI --batch
// messages) — instead of the template silently dropping it or inserting vision placeholders.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dfl {

// "image" for image_url / image / input_image / image_file, "video" for video / video_url,
// "audio" for input_audio / audio; "" for any other type.
std::string media_part_kind(std::string_view part_type);

// "image input is not supported: this is a text-only model (send text content parts only)".
std::string media_refusal(const std::string& kind);

// Throws dfl::Error "messages[i].content[j]: <media_refusal>" for the first media part found in
// messages whose content is an array of parts (other content is left to the template).
void require_text_only(const nlohmann::ordered_json& messages);

}  // namespace dfl
