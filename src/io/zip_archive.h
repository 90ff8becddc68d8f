// Read-only view of a zip archive (the container of torch.save files), on top of libzip.
//
// Contract: the archive is opened with libzip's consistency checks; entry reads are bounded by the
// entry's declared size and by a caller-given cap, and a size or CRC mismatch is a dfl::Error.
// Nothing here executes or interprets entry contents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mmap.h"

struct zip;

namespace dfl {

class ZipArchive {
 public:
  // Maps the file and opens it; throws dfl::Error naming the file when it is not a readable zip.
  static ZipArchive open_file(const std::string& path);
  // Opens `size` bytes at `data` (not copied: the caller keeps them alive). `origin` names the
  // buffer in messages.
  static ZipArchive open_memory(const uint8_t* data, size_t size, const std::string& origin);

  ZipArchive(ZipArchive&&) noexcept;
  ZipArchive& operator=(ZipArchive&&) noexcept;
  ~ZipArchive();

  const std::string& origin() const { return origin_; }
  // Entry names in archive order (raw bytes as stored).
  const std::vector<std::string>& names() const { return names_; }
  std::optional<size_t> locate(std::string_view name) const;
  // Declared uncompressed size of entry i.
  uint64_t entry_size(size_t i) const { return sizes_.at(i); }
  // The whole entry; throws if it is larger than `max_bytes`, short, long, or fails its CRC.
  std::string read(size_t i, uint64_t max_bytes) const;

 private:
  ZipArchive() = default;
  void open(const uint8_t* data, size_t size);

  std::unique_ptr<MappedFile> map_;  // set by open_file; heap-held so `data` survives moves
  ::zip* za_ = nullptr;
  std::string origin_;
  std::vector<std::string> names_;
  std::vector<uint64_t> sizes_;
  std::unordered_map<std::string, size_t> index_;  // name → first entry with that name
};

}  // namespace dfl
