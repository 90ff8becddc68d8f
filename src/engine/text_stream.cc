#include "engine/text_stream.h"

#include <algorithm>

namespace dfl {

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stop)
    : dec_(tok, /*skip_special_tokens=*/true), stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  for (const auto& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

// Sends held_ except its last `keep_back` bytes, backing off to a UTF-8 character boundary.
std::string TextStream::release(size_t keep_back) {
  if (held_.size() <= keep_back) return {};
  size_t cut = held_.size() - keep_back;
  while (cut > 0 && (static_cast<unsigned char>(held_[cut]) & 0xC0) == 0x80) --cut;
  std::string out = held_.substr(0, cut);
  held_.erase(0, cut);
  return out;
}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  held_ += dec_.push(token);
  if (stop_.empty()) return release(0);
  size_t first = std::string::npos;
  for (const auto& s : stop_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  return release(max_stop_ - 1);
}

std::string TextStream::finish() {
  if (stopped_) return {};
  held_ += dec_.flush();
  size_t first = std::string::npos;
  for (const auto& s : stop_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    held_.resize(first);
  }
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace dfl
