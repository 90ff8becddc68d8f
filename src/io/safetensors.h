// Hardened reader for the safetensors format.
//
// Layout: [u64 little-endian header length N][N bytes of JSON][data section]. The JSON object maps
// tensor names to {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]} (offsets relative
// to the start of the data section) plus an optional "__metadata__" object of string → string.
//
// Contract: a file is accepted only when every tensor entry is well formed: a known dtype, a shape
// of non-negative integers, offsets with begin <= end inside the data section, end - begin equal to
// dtype_size × prod(shape) (computed without overflow), no two tensors sharing bytes, names that
// are non-empty valid UTF-8 and unique. Anything else throws dfl::Error naming the file, the tensor
// and the problem. Nothing is copied: TensorInfo::data points into the caller's buffer (the
// mapping).
//
// Alignment: the data section starts at 8 + N; writers usually pad N to a multiple of 8, but this
// is not required, so `data` may be unaligned. Consumers that need alignment must check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mmap.h"

namespace dfl {

// One stored tensor, viewed in place.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;     // outermost first; {} for a scalar
  const uint8_t* data = nullptr;  // row-major contiguous bytes; may be unaligned
  size_t nbytes = 0;              // == dtype_size(dtype) * numel()
  std::string file;               // path of the file holding it (for messages)

  int64_t numel() const;
};

// "[64, 32]" — used in error messages throughout the loader.
std::string shape_str(const std::vector<int64_t>& shape);

// Limits that keep a hostile header from costing much before it is rejected.
inline constexpr uint64_t kSafetensorsMaxHeader = 100ull << 20;  // same cap as the reference
inline constexpr size_t kSafetensorsMaxRank = 16;

// The parsed header of one safetensors buffer.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in file (offset) order
  std::map<std::string, std::string> metadata;
  size_t data_offset = 0;  // 8 + header length
};

// Parses `size` bytes at `data` (a whole safetensors file). `origin` names the buffer in messages
// (normally the file path). Throws dfl::Error on any malformed input; never reads outside
// [data, data + size). The returned TensorInfo::data pointers alias `data`.
SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& origin);

// A mapped safetensors file. Move-only; tensors point into the mapping and stay valid while the
// object lives (moving keeps the mapping address, so pointers survive a move).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  const std::string& path() const { return map_.path(); }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // Linear scan; Checkpoint offers indexed lookup over many files.
  const TensorInfo* find(std::string_view name) const;

 private:
  MappedFile map_;
  SafetensorsHeader header_;
};

}  // namespace dfl
