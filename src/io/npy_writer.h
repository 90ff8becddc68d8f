// Writes NumPy .npy files (format 1.0, little-endian, C order) — the shard format of
// `dflash dump-taps`, read by numpy.load / torch without any extra package.
// dtype strings are NumPy's: "<i4" (int32), "<u2" (uint16, used for bf16 bit patterns), "<f4".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dfl {

// Writes `data` (bytes, size = prod(shape) × itemsize of dtype) as `path`. Throws dfl::Error on
// an I/O failure or a size that does not match the shape.
void write_npy(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape,
               const void* data, size_t bytes);

}  // namespace dfl
