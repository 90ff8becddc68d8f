#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"  // shape_str
#include "io/utf8.h"

namespace dfl {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "?";
}

namespace {

// Fixed element size of a scalar type; 0 for string/array/unknown.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    default: return 0;
  }
}

bool valid_type(uint32_t t) { return t <= 12; }

constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4, true, DType::kF32},
    {1, "F16", 1, 2, true, DType::kF16},
    {2, "Q4_0", 32, 18, true, DType::kQ4_0},
    {3, "Q4_1", 32, 20, true, DType::kQ4_1},
    {6, "Q5_0", 32, 22, true, DType::kQ5_0},
    {7, "Q5_1", 32, 24, true, DType::kQ5_1},
    {8, "Q8_0", 32, 34, true, DType::kQ8_0},
    {9, "Q8_1", 32, 36, false, DType::kF32},
    {10, "Q2_K", 256, 84, false, DType::kF32},
    {11, "Q3_K", 256, 110, false, DType::kF32},
    {12, "Q4_K", 256, 144, true, DType::kQ4_K},
    {13, "Q5_K", 256, 176, true, DType::kQ5_K},
    {14, "Q6_K", 256, 210, true, DType::kQ6_K},
    {15, "Q8_K", 256, 292, false, DType::kF32},
    {16, "IQ2_XXS", 256, 66, false, DType::kF32},
    {17, "IQ2_XS", 256, 74, false, DType::kF32},
    {18, "IQ3_XXS", 256, 98, false, DType::kF32},
    {19, "IQ1_S", 256, 50, false, DType::kF32},
    {20, "IQ4_NL", 32, 18, false, DType::kF32},
    {21, "IQ3_S", 256, 110, false, DType::kF32},
    {22, "IQ2_S", 256, 82, false, DType::kF32},
    {23, "IQ4_XS", 256, 136, false, DType::kF32},
    {24, "I8", 1, 1, true, DType::kI8},
    {25, "I16", 1, 2, true, DType::kI16},
    {26, "I32", 1, 4, true, DType::kI32},
    {27, "I64", 1, 8, true, DType::kI64},
    {28, "F64", 1, 8, true, DType::kF64},
    {29, "IQ1_M", 256, 56, false, DType::kF32},
    {30, "BF16", 1, 2, true, DType::kBF16},
    {34, "TQ1_0", 256, 54, false, DType::kF32},
    {35, "TQ2_0", 256, 66, false, DType::kF32},
    {39, "MXFP4", 32, 17, false, DType::kF32},
};

std::string printable(std::string_view s, size_t max_len = 120) {
  std::string out;
  const size_t n = std::min<size_t>(s.size(), max_len);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > n) out += "...";
  return out;
}

template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // x86-64 and every platform we build for is little-endian
  return v;
}

// Bounds-checked cursor over the buffer.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& origin)
      : data_(data), size_(size), origin_(origin) {}

  template <typename... A>
  [[noreturn]] void fail(const A&... parts) const {
    throw Error(str("gguf '", origin_, "': ", parts..., " (at byte ", pos_, " of ", size_, ")"));
  }
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  void need(uint64_t n, const char* what) {
    if (n > left())
      fail(what, " needs ", n, " bytes but only ", left(), " remain; file truncated?");
  }
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    const T v = load_le<T>(data_ + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::string_view string(const char* what) {
    const uint64_t n = get<uint64_t>(what);
    need(n, what);
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  void skip(uint64_t n, const char* what) {
    need(n, what);
    pos_ += static_cast<size_t>(n);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& origin_;
};

void read_value(Reader& r, GgufType type, GgufValue* v, int depth, std::string_view key);

void read_scalar(Reader& r, GgufType t, GgufValue* v) {
  v->type = t;
  switch (t) {
    case GgufType::kU8: v->u = r.get<uint8_t>("u8 value"); break;
    case GgufType::kI8: v->i = r.get<int8_t>("i8 value"); break;
    case GgufType::kU16: v->u = r.get<uint16_t>("u16 value"); break;
    case GgufType::kI16: v->i = r.get<int16_t>("i16 value"); break;
    case GgufType::kU32: v->u = r.get<uint32_t>("u32 value"); break;
    case GgufType::kI32: v->i = r.get<int32_t>("i32 value"); break;
    case GgufType::kU64: v->u = r.get<uint64_t>("u64 value"); break;
    case GgufType::kI64: v->i = r.get<int64_t>("i64 value"); break;
    case GgufType::kF32: v->f = r.get<float>("f32 value"); break;
    case GgufType::kF64: v->f = r.get<double>("f64 value"); break;
    case GgufType::kBool: {
      const uint8_t b = r.get<uint8_t>("bool value");
      if (b > 1) r.fail("bool value ", int(b), " is not 0 or 1");
      v->u = b;
      break;
    }
    default: break;
  }
}

void read_value(Reader& r, GgufType type, GgufValue* v, int depth, std::string_view key) {
  v->type = type;
  if (type == GgufType::kString) {
    v->str = r.string("string value");
    return;
  }
  if (type != GgufType::kArray) {
    read_scalar(r, type, v);
    return;
  }
  if (depth >= kGgufMaxDepth)
    r.fail("key '", printable(key), "': arrays nested deeper than ", kGgufMaxDepth);
  const uint32_t et = r.get<uint32_t>("array element type");
  if (!valid_type(et)) r.fail("key '", printable(key), "': unknown array element type ", et);
  v->elem = static_cast<GgufType>(et);
  v->count = r.get<uint64_t>("array length");
  if (const size_t es = scalar_size(v->elem)) {
    uint64_t bytes;
    if (__builtin_mul_overflow(v->count, es, &bytes) || bytes > r.left())
      r.fail("key '", printable(key), "': array of ", v->count, " ", gguf_type_name(v->elem),
             " runs past the end of the file; file truncated?");
    v->raw = r.here();
    if (v->elem == GgufType::kBool)
      for (uint64_t i = 0; i < v->count; ++i)
        if (v->raw[i] > 1) r.fail("key '", printable(key), "': bool array element ", i, " is not 0 or 1");
    r.skip(bytes, "array");
    return;
  }
  // Each string element takes >= 8 bytes, each nested array >= 12: bound the count before
  // reserving anything.
  const uint64_t min_each = v->elem == GgufType::kString ? 8 : 12;
  if (v->count > r.left() / min_each)
    r.fail("key '", printable(key), "': array length ", v->count,
           " cannot fit in the rest of the file; file truncated?");
  if (v->elem == GgufType::kString) {
    v->strs.reserve(static_cast<size_t>(v->count));
    for (uint64_t i = 0; i < v->count; ++i) v->strs.push_back(r.string("array string"));
  } else {
    v->items.resize(static_cast<size_t>(v->count));
    for (auto& it : v->items) read_value(r, GgufType::kArray, &it, depth + 1, key);
  }
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16:
    case GgufType::kU32: case GgufType::kI32: case GgufType::kU64: case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

double GgufValue::array_f64(uint64_t idx) const {
  const uint8_t* p = raw + idx * scalar_size(elem);
  switch (elem) {
    case GgufType::kF32: return load_le<float>(p);
    case GgufType::kF64: return load_le<double>(p);
    case GgufType::kU64: return static_cast<double>(load_le<uint64_t>(p));
    default: return static_cast<double>(array_i64(idx));
  }
}

int64_t GgufValue::array_i64(uint64_t idx) const {
  const uint8_t* p = raw + idx * scalar_size(elem);
  switch (elem) {
    case GgufType::kU8: case GgufType::kBool: return *p;
    case GgufType::kI8: return static_cast<int8_t>(*p);
    case GgufType::kU16: return load_le<uint16_t>(p);
    case GgufType::kI16: return load_le<int16_t>(p);
    case GgufType::kU32: return load_le<uint32_t>(p);
    case GgufType::kI32: return load_le<int32_t>(p);
    case GgufType::kI64: return load_le<int64_t>(p);
    case GgufType::kU64: {
      const uint64_t u = load_le<uint64_t>(p);
      return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
    }
    default: return 0;
  }
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

int64_t GgufTensor::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < ne.size(); ++i) n *= ne[i];
  return n;
}

std::vector<int64_t> GgufTensor::shape() const { return {ne.rbegin(), ne.rend()}; }

DType GgufTensor::dtype(const std::string& origin) const {
  if (!type || !type->has_dtype)
    throw Error(str("gguf '", origin, "': tensor '", printable(name), "' has ggml type ",
                    type ? type->name : "?", ", which is not supported (supported: F32 F16 BF16 "
                    "Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K I8 I16 I32 I64 F64)"));
  return type->dtype;
}

GgufHeader parse_gguf(const uint8_t* data, size_t size, const std::string& origin) {
  Reader r(data, size, origin);
  GgufHeader h;
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0)
    r.fail("does not start with the magic \"GGUF\"; not a GGUF file");
  r.skip(4, "magic");
  h.version = r.get<uint32_t>("version");
  if (h.version == 1) r.fail("GGUF version 1 is not supported (re-convert with a current llama.cpp)");
  if (h.version != 2 && h.version != 3)
    r.fail("unsupported GGUF version ", h.version,
           (h.version > 0xffff ? " (a big-endian file?)" : ""), "; versions 2 and 3 are read");
  const uint64_t n_tensors = r.get<uint64_t>("tensor count");
  const uint64_t n_kv = r.get<uint64_t>("metadata count");
  // A key/value pair takes >= 8 + 1 + 4 + 1 bytes, a tensor info >= 8 + 4 + 4 + 8.
  if (n_kv > r.left() / 14) r.fail("metadata count ", n_kv, " cannot fit in the file");
  if (n_tensors > r.left() / 24) r.fail("tensor count ", n_tensors, " cannot fit in the file");

  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string_view key = r.string("metadata key");
    if (key.empty()) r.fail("metadata key ", k, " is empty");
    if (!is_valid_utf8(key)) r.fail("metadata key '", printable(key), "' is not valid UTF-8");
    const uint32_t t = r.get<uint32_t>("metadata value type");
    if (!valid_type(t)) r.fail("key '", printable(key), "': unknown value type ", t);
    GgufValue v;
    read_value(r, static_cast<GgufType>(t), &v, 0, key);
    std::string ks(key);
    if (h.kv.count(ks)) r.fail("key '", printable(key), "' appears twice");
    h.kv_order.push_back(ks);
    h.kv.emplace(std::move(ks), std::move(v));
  }

  if (auto it = h.kv.find("general.alignment"); it != h.kv.end()) {
    const GgufValue& a = it->second;
    if (a.type != GgufType::kU32)
      r.fail("general.alignment has type ", gguf_type_name(a.type), ", expected u32");
    if (a.u == 0 || (a.u & (a.u - 1)) != 0 || a.u > (1u << 30))
      r.fail("general.alignment ", a.u, " is not a power of two");
    h.alignment = static_cast<uint32_t>(a.u);
  }

  std::set<std::string_view> names;
  h.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t ti = 0; ti < n_tensors; ++ti) {
    GgufTensor t;
    t.name = r.string("tensor name");
    auto tfail = [&](const auto&... parts) {
      r.fail("tensor '", printable(t.name), "': ", parts...);
    };
    if (t.name.empty()) r.fail("tensor ", ti, " has an empty name");
    if (!is_valid_utf8(t.name)) tfail("name is not valid UTF-8");
    if (!names.insert(t.name).second) tfail("appears twice");
    const uint32_t nd = r.get<uint32_t>("tensor rank");
    if (nd > kGgufMaxDims) tfail(nd, " dimensions (at most ", kGgufMaxDims, ")");
    uint64_t numel = 1;
    bool overflow = false, zero = false;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t v = r.get<uint64_t>("tensor dimension");
      if (v > static_cast<uint64_t>(INT64_MAX)) tfail("dimension ", d, " = ", v, " is too large");
      t.ne.push_back(static_cast<int64_t>(v));
      if (v == 0) zero = true;
      if (!overflow && __builtin_mul_overflow(numel, v, &numel)) overflow = true;
    }
    if (zero) numel = 0, overflow = false;
    t.ggml_type = r.get<uint32_t>("tensor type");
    t.type = ggml_type_info(t.ggml_type);
    if (!t.type) tfail("unknown ggml type ", t.ggml_type);
    t.offset = r.get<uint64_t>("tensor offset");
    const uint64_t ne0 = t.ne.empty() ? 1 : static_cast<uint64_t>(t.ne[0]);
    const uint64_t be = static_cast<uint64_t>(t.type->block_elems);
    if (ne0 % be != 0)
      tfail("ne[0] = ", ne0, " is not a multiple of the ", t.type->name, " block size ", be);
    uint64_t bytes = 0;
    if (overflow || numel > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(numel / be, static_cast<uint64_t>(t.type->block_bytes), &bytes) ||
        bytes > size)
      tfail("shape ", shape_str(t.ne), " of ", t.type->name, " is larger than the file");
    t.nbytes = static_cast<size_t>(bytes);
    if (t.offset % h.alignment != 0)
      tfail("offset ", t.offset, " is not a multiple of the alignment ", h.alignment);
    h.tensors.push_back(std::move(t));
  }

  // Data section: the end of the tensor infos rounded up to the alignment. A file with no
  // tensors may end before the padding.
  const uint64_t pos = r.pos();
  const uint64_t data_off = (pos + h.alignment - 1) / h.alignment * h.alignment;
  if (data_off > size) {
    if (!h.tensors.empty())
      r.fail("data section at ", data_off, " starts past the end of the file; file truncated?");
    h.data_offset = size;
    return h;
  }
  h.data_offset = static_cast<size_t>(data_off);
  const uint64_t data_size = size - data_off;

  std::vector<size_t> order(h.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (auto& t : h.tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      throw Error(str("gguf '", origin, "': tensor '", printable(t.name), "' [", t.offset, ", ",
                      t.offset + t.nbytes, ") of the data section runs past the end of the file (",
                      data_size, " data bytes); file truncated?"));
    t.data = data + data_off + t.offset;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return h.tensors[a].offset < h.tensors[b].offset;
  });
  const GgufTensor* prev = nullptr;
  for (size_t i : order) {
    const GgufTensor& t = h.tensors[i];
    if (t.nbytes == 0) continue;
    if (prev && t.offset < prev->offset + prev->nbytes)
      throw Error(str("gguf '", origin, "': tensors '", printable(prev->name), "' and '",
                      printable(t.name), "' overlap in the data section"));
    prev = &t;
  }
  return h;
}

// ---- GgufFile ---------------------------------------------------------------------------------

GgufFile::GgufFile(const std::string& path) : map_(path) {
  h_ = parse_gguf(map_.data(), map_.size(), path);
  index_.reserve(h_.tensors.size());
  for (size_t i = 0; i < h_.tensors.size(); ++i) index_.emplace(h_.tensors[i].name, i);
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &h_.tensors[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (!t) throw Error(str("gguf '", path(), "': tensor '", printable(name), "' not found"));
  return *t;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = h_.kv.find(key);
  return it == h_.kv.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::need(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) throw Error(str("gguf '", path(), "': missing key '", printable(key), "'"));
  return *v;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const GgufValue& v,
                             const char* want) {
  std::string have = gguf_type_name(v.type);
  if (v.type == GgufType::kArray) have = str("array of ", gguf_type_name(v.elem));
  throw Error(str("gguf '", path, "': key '", printable(key), "' has type ", have, ", expected ",
                  want));
}

// Integer value as a (signed) 128-bit-safe pair check.
bool int_value(const GgufValue& v, int64_t lo, uint64_t hi, uint64_t* out_u, int64_t* out_i) {
  const bool is_unsigned = v.type == GgufType::kU8 || v.type == GgufType::kU16 ||
                           v.type == GgufType::kU32 || v.type == GgufType::kU64;
  if (is_unsigned) {
    if (v.u > hi) return false;
    *out_u = v.u;
    *out_i = static_cast<int64_t>(v.u);
    return true;
  }
  if (v.i < lo || (v.i > 0 && static_cast<uint64_t>(v.i) > hi)) return false;
  *out_i = v.i;
  *out_u = static_cast<uint64_t>(v.i);
  return true;
}
}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = need(key);
  if (v.type != GgufType::kString) wrong_type(path(), key, v, "string");
  return std::string(v.str);
}

std::string GgufFile::get_string_or(std::string_view key, const std::string& def) const {
  return has(key) ? get_string(key) : def;
}

uint32_t GgufFile::get_u32(std::string_view key) const {
  const GgufValue& v = need(key);
  if (!v.is_integer()) wrong_type(path(), key, v, "an integer");
  uint64_t u;
  int64_t i;
  if (!int_value(v, 0, UINT32_MAX, &u, &i))
    throw Error(str("gguf '", path(), "': key '", printable(key), "' value ",
                    (v.type == GgufType::kU64 ? std::to_string(v.u) : std::to_string(v.i)),
                    " does not fit u32"));
  return static_cast<uint32_t>(u);
}

uint32_t GgufFile::get_u32_or(std::string_view key, uint32_t def) const {
  return has(key) ? get_u32(key) : def;
}

int64_t GgufFile::get_i64(std::string_view key) const {
  const GgufValue& v = need(key);
  if (!v.is_integer()) wrong_type(path(), key, v, "an integer");
  uint64_t u;
  int64_t i;
  if (!int_value(v, INT64_MIN, static_cast<uint64_t>(INT64_MAX), &u, &i))
    throw Error(str("gguf '", path(), "': key '", printable(key), "' value ", v.u,
                    " does not fit i64"));
  return i;
}

float GgufFile::get_f32(std::string_view key) const {
  const GgufValue& v = need(key);
  if (!v.is_float()) wrong_type(path(), key, v, "f32");
  return static_cast<float>(v.f);
}

float GgufFile::get_f32_or(std::string_view key, float def) const {
  return has(key) ? get_f32(key) : def;
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = need(key);
  if (v.type != GgufType::kBool) wrong_type(path(), key, v, "bool");
  return v.u != 0;
}

bool GgufFile::get_bool_or(std::string_view key, bool def) const {
  return has(key) ? get_bool(key) : def;
}

const GgufValue& GgufFile::get_array(std::string_view key) const {
  const GgufValue& v = need(key);
  if (v.type != GgufType::kArray) wrong_type(path(), key, v, "array");
  return v;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = get_array(key);
  if (v.elem != GgufType::kString) wrong_type(path(), key, v, "array of string");
  return {v.strs.begin(), v.strs.end()};
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const GgufValue& v = get_array(key);
  if (!scalar_size(v.elem) || v.elem == GgufType::kBool)
    wrong_type(path(), key, v, "array of numbers");
  std::vector<float> out(static_cast<size_t>(v.count));
  for (uint64_t i = 0; i < v.count; ++i) out[i] = static_cast<float>(v.array_f64(i));
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
  const GgufValue& v = get_array(key);
  if (!scalar_size(v.elem) || v.elem == GgufType::kBool || v.elem == GgufType::kF32 ||
      v.elem == GgufType::kF64)
    wrong_type(path(), key, v, "array of integers");
  std::vector<int32_t> out(static_cast<size_t>(v.count));
  for (uint64_t i = 0; i < v.count; ++i) {
    const int64_t x = v.array_i64(i);
    if (x < INT32_MIN || x > INT32_MAX)
      throw Error(str("gguf '", path(), "': key '", printable(key), "' element ", i, " = ", x,
                      " does not fit i32"));
    out[i] = static_cast<int32_t>(x);
  }
  return out;
}

}  // namespace dfl
