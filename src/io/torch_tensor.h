// Copying a strided view out of a raw torch storage (internal to the .pt reader; exposed for
// tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/torch_pickle.h"

namespace dfl {

inline constexpr size_t kPtMaxRank = 16;

// Fills `out` (dtype, shape, source strides/offset, contiguous data) from `storage` bytes holding
// elements of `dtype`, starting at element `offset`, with the given sizes and strides (elements).
// Returns false with a reason in `why` when the view is invalid: negative size/stride/offset, rank
// over kPtMaxRank, element or byte counts overflowing, the view reaching past the storage, or more
// than `max_bytes` bytes to materialize. Never reads outside `storage`.
bool copy_strided(const std::string& storage, DType dtype, int64_t offset,
                  const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                  uint64_t max_bytes, PtTensor* out, std::string* why);

}  // namespace dfl
