#include "chat/content_parts.h"

#include "core/error.h"

namespace dfl {

std::string media_part_kind(std::string_view t) {
  if (t == "image_url" || t == "image" || t == "input_image" || t == "image_file") return "image";
  if (t == "video" || t == "video_url" || t == "input_video") return "video";
  if (t == "input_audio" || t == "audio" || t == "audio_url") return "audio";
  return "";
}

std::string media_refusal(const std::string& kind) {
  return kind + " input is not supported: this is a text-only model (send text content parts only)";
}

void require_text_only(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object()) continue;
    const auto c = m.find("content");
    if (c == m.end() || !c->is_array()) continue;
    for (size_t j = 0; j < c->size(); ++j) {
      const auto& part = (*c)[j];
      if (!part.is_object()) continue;
      const auto t = part.find("type");
      const std::string kind = t != part.end() && t->is_string() ? media_part_kind(t->get<std::string>()) : "";
      // HF-style parts may name the media by key alone ({"image": "..."}).
      const std::string keyed = part.contains("image") || part.contains("image_url") ? "image" : "";
      if (!kind.empty() || !keyed.empty())
        throw Error(str("messages[", i, "].content[", j, "]: ", media_refusal(kind.empty() ? keyed : kind)));
    }
  }
}

}  // namespace dfl
