// A request's output text as it streams: incremental detokenization (special tokens skipped,
// never a split UTF-8 character) and stop strings matched across token boundaries. Text that
// could still turn out to be the start of a stop string is held back; once a stop string
// completes, the text before it is released, the stop string and everything after it never are.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dfl {

class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stop);
  // Adds one committed token; returns the text now safe to send (maybe empty).
  std::string push(int32_t token);
  // True once a stop string has completed (push then returns nothing more).
  bool stopped() const { return stopped_; }
  // At the end of the request: whatever is still held back (unless a stop string ended it).
  std::string finish();

 private:
  std::string release(size_t keep_back);

  StreamDecoder dec_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace dfl
