// Hardened reader for GGUF files (llama.cpp / ggml), versions 2 and 3, little-endian.
//
// Layout: "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv × (string key, u32 type, value)
//   | n_tensors × (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset)
//   | padding to general.alignment (default 32) | data section.
// Strings are u64 length + bytes (no terminator). Arrays are u32 element type + u64 count +
// elements; arrays of arrays are allowed (nesting depth ≤ kGgufMaxDepth). Tensor offsets are
// relative to the data section and multiples of the alignment. ne[0] is the innermost,
// contiguous dimension: a 2-D weight with ne = [n_in, n_out] is torch [n_out, n_in] row-major,
// each row a run of ne[0] / block_elems blocks.
//
// Contract (as io/safetensors.h): every count, string length, dimension, offset and byte size is
// checked against the buffer with overflow-safe arithmetic before use; keys and tensor names must
// be unique; tensors must lie inside the data section, be aligned, have ne[0] a multiple of their
// type's block size and not overlap. Anything else throws dfl::Error with one line naming the
// file and the problem. Nothing is copied: strings, array payloads and tensor data are views into
// the caller's buffer (the mapping). Big-endian GGUF files are rejected (the version field reads
// as a huge number).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mmap.h"

namespace dfl {

// Metadata value types (gguf_type).
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* gguf_type_name(GgufType t);

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDepth = 8;        // nesting of arrays of arrays
inline constexpr uint32_t kGgufMaxDims = 4;    // GGML_MAX_DIMS

// One metadata value. Scalars are widened: integers in `i` (signed types) or `u` (unsigned and
// bool), floats in `f`. Strings view the buffer. Arrays: `count` elements of `elem`; fixed-size
// elements stay in place at `raw` (little-endian, unaligned), string elements are listed in
// `strs`, nested arrays in `items`.
struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0.0;
  std::string_view str;
  GgufType elem = GgufType::kU8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;
  std::vector<std::string_view> strs;
  std::vector<GgufValue> items;

  bool is_integer() const;  // any of the 8 integer types (not bool)
  bool is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  // Element i of a fixed-size numeric array, widened (callers check elem first).
  double array_f64(uint64_t idx) const;
  int64_t array_i64(uint64_t idx) const;  // integer element types only (u64 > INT64_MAX clamps)
};

// ggml tensor types (ggml_type ids) the reader knows the block geometry of.
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
  bool has_dtype;  // our DType supports it (the rest parse, but cannot be used as weights)
  DType dtype;
};
const GgmlTypeInfo* ggml_type_info(uint32_t id);

struct GgufTensor {
  std::string_view name;
  uint32_t ggml_type = 0;
  const GgmlTypeInfo* type = nullptr;
  std::vector<int64_t> ne;        // ggml order: ne[0] innermost (contiguous)
  uint64_t offset = 0;            // relative to the data section
  const uint8_t* data = nullptr;  // into the buffer; aligned to the file's alignment relative to
                                  // the buffer start
  size_t nbytes = 0;

  int64_t numel() const;
  // torch order (outermost first): reverse of ne.
  std::vector<int64_t> shape() const;
  // As a matrix: cols = ne[0], rows = product of the other dims.
  int64_t cols() const { return ne.empty() ? 1 : ne[0]; }
  int64_t rows() const;
  // Our DType for it; throws dfl::Error naming the tensor when the ggml type is not supported.
  DType dtype(const std::string& origin) const;
};

struct GgufHeader {
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;
  size_t data_offset = 0;  // start of the data section in the buffer
  std::map<std::string, GgufValue, std::less<>> kv;
  std::vector<std::string> kv_order;  // keys in file order
  std::vector<GgufTensor> tensors;    // in file order
};

// Parses `size` bytes at `data` (a whole GGUF file). `origin` names the buffer in messages.
// Throws dfl::Error on any malformed input; never reads outside [data, data + size). All views
// alias `data`.
GgufHeader parse_gguf(const uint8_t* data, size_t size, const std::string& origin);

// A mapped GGUF file with typed accessors. Move-only; views stay valid while it lives.
class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;

  const std::string& path() const { return map_.path(); }
  const GgufHeader& header() const { return h_; }
  uint32_t version() const { return h_.version; }
  const std::vector<GgufTensor>& tensors() const { return h_.tensors; }
  const GgufTensor* find_tensor(std::string_view name) const;  // hashed lookup
  // Throws "tensor 'x' not found".
  const GgufTensor& tensor(std::string_view name) const;

  // Metadata. find() returns nullptr when absent. The get_* accessors throw dfl::Error naming the
  // file and key: "missing key" when absent, "has type X, expected Y" when the type is wrong.
  // Integers: any integer type whose value fits the requested type is accepted (writers differ
  // between u32 and i32); floats: f32 or f64. The *_or variants return `def` when absent (but
  // still throw on a wrong type).
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  std::string get_string(std::string_view key) const;
  std::string get_string_or(std::string_view key, const std::string& def) const;
  uint32_t get_u32(std::string_view key) const;
  uint32_t get_u32_or(std::string_view key, uint32_t def) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  float get_f32_or(std::string_view key, float def) const;
  bool get_bool(std::string_view key) const;
  bool get_bool_or(std::string_view key, bool def) const;
  // Arrays (wrong element type throws; an absent key throws "missing key").
  const GgufValue& get_array(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;    // any numeric elements
  std::vector<int32_t> get_i32_array(std::string_view key) const;  // integer elements that fit

 private:
  const GgufValue& need(std::string_view key) const;
  MappedFile map_;
  GgufHeader h_;
  std::unordered_map<std::string_view, size_t> index_;  // tensor name (view into the mapping) → index
};

}  // namespace dfl
