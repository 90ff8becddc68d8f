#include "io/torch_tensor.h"

#include <cstring>

#include "core/error.h"

namespace dfl {

int64_t PtTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> PtTensor::to_f32() const {
  const size_t n = data.size() / dtype_size(dtype);
  std::vector<float> out(n);
  const uint8_t* p = data.data();
  for (size_t k = 0; k < n; ++k) {
    switch (dtype) {
      case DType::kF32:
        std::memcpy(&out[k], p + 4 * k, 4);
        break;
      case DType::kF64: {
        double d;
        std::memcpy(&d, p + 8 * k, 8);
        out[k] = static_cast<float>(d);
        break;
      }
      case DType::kBF16:
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * k, 2);
        out[k] = dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
        break;
      }
      case DType::kF8E4M3:
        out[k] = f8e4m3_to_f32(p[k]);
        break;
      case DType::kF8E5M2:
        out[k] = f8e5m2_to_f32(p[k]);
        break;
      case DType::kI8:
        out[k] = static_cast<int8_t>(p[k]);
        break;
      case DType::kU8:
        out[k] = p[k];
        break;
      case DType::kBool:
        out[k] = p[k] ? 1.f : 0.f;
        break;
      case DType::kI16: {
        int16_t v;
        std::memcpy(&v, p + 2 * k, 2);
        out[k] = v;
        break;
      }
      case DType::kI32: {
        int32_t v;
        std::memcpy(&v, p + 4 * k, 4);
        out[k] = static_cast<float>(v);
        break;
      }
      case DType::kI64: {
        int64_t v;
        std::memcpy(&v, p + 8 * k, 8);
        out[k] = static_cast<float>(v);
        break;
      }
    }
  }
  return out;
}

bool copy_strided(const std::string& storage, DType dtype, int64_t offset,
                  const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                  uint64_t max_bytes, PtTensor* out, std::string* why) {
  const uint64_t es = dtype_size(dtype);
  if (shape.size() != strides.size()) return *why = "size and stride ranks differ", false;
  if (shape.size() > kPtMaxRank)
    return *why = str("rank ", shape.size(), " over ", kPtMaxRank), false;
  if (offset < 0) return *why = str("negative storage_offset ", offset), false;
  uint64_t numel = 1, last = 0;  // `last`: element index of the view's final element, minus offset
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || strides[d] < 0)
      return *why = str("negative size or stride in dim ", d), false;
    if (shape[d] == 0) empty = true;
  }
  if (!empty) {
    for (size_t d = 0; d < shape.size(); ++d) {
      const auto n = static_cast<uint64_t>(shape[d]), s = static_cast<uint64_t>(strides[d]);
      uint64_t span;
      if (__builtin_mul_overflow(numel, n, &numel) || __builtin_mul_overflow(n - 1, s, &span) ||
          __builtin_add_overflow(last, span, &last))
        return *why = "tensor size overflows", false;
    }
  } else {
    numel = 0;
  }
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, es, &nbytes) || nbytes > max_bytes)
    return *why = str("tensor of ", numel, " elements exceeds the size limit"), false;
  const uint64_t storage_elems = storage.size() / es;
  uint64_t end;  // one past the last element read
  if (!empty &&
      (__builtin_add_overflow(static_cast<uint64_t>(offset), last, &end) || end >= storage_elems))
    return *why = str("tensor view (offset ", offset, ", last element ", offset, "+", last,
                      ") reaches past its storage of ", storage_elems, " elements"),
           false;

  out->dtype = dtype;
  out->shape = shape;
  out->source_strides = strides;
  out->source_offset = offset;
  out->data.resize(static_cast<size_t>(nbytes));
  if (numel == 0) return true;

  const auto* src = reinterpret_cast<const uint8_t*>(storage.data()) + offset * es;
  // Contiguous fast path.
  bool contiguous = true;
  uint64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && static_cast<uint64_t>(strides[d]) != expect) contiguous = false;
    expect *= static_cast<uint64_t>(shape[d]);
  }
  if (contiguous) {
    std::memcpy(out->data.data(), src, static_cast<size_t>(nbytes));
    return true;
  }
  // General path: odometer over the multi-index, innermost dimension fastest.
  std::vector<int64_t> idx(shape.size(), 0);
  uint64_t at = 0;  // element offset of idx relative to src
  uint8_t* dst = out->data.data();
  for (uint64_t k = 0; k < numel; ++k) {
    std::memcpy(dst + k * es, src + at * es, es);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) {
        at += static_cast<uint64_t>(strides[d]);
        break;
      }
      at -= static_cast<uint64_t>(strides[d]) * static_cast<uint64_t>(shape[d] - 1);
      idx[d] = 0;
    }
  }
  return true;
}

}  // namespace dfl
