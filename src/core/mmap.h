// Read-only memory-mapped file (RAII). Weights used as stored point straight into the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dfl {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only; throws dfl::Error naming the file when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) file into a string; throws dfl::Error naming the file on failure.
std::string read_text_file(const std::string& path);
bool file_exists(const std::string& path);
bool dir_exists(const std::string& path);

}  // namespace dfl
