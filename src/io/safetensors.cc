#include "io/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/utf8.h"

namespace dfl {

using nlohmann::json;

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

// Names can be hostile (huge, control bytes); keep them printable and short inside messages.
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

// Reads a JSON integer that must be >= 0 (shape entries, offsets).
bool get_u64(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

// A short description of a JSON value for messages. Never dump() untrusted values: dump() recurses
// and the value may be nested thousands deep.
std::string describe(const json& j) {
  if (j.is_number_integer() || j.is_number_unsigned() || j.is_number_float() || j.is_boolean() ||
      j.is_null())
    return j.dump();
  if (j.is_string()) return "\"" + printable(j.get_ref<const std::string&>(), 40) + "\"";
  if (j.is_array() && j.size() <= 4) {
    std::string s = "[";
    for (size_t i = 0; i < j.size(); ++i) {
      const json& x = j[i];
      s += (i ? ", " : "") + ((x.is_number() || x.is_boolean() || x.is_null())
                                  ? x.dump()
                                  : std::string(x.type_name()));
    }
    return s + "]";
  }
  return std::string("a JSON ") + j.type_name();
}

struct Parsed {
  TensorInfo info;
  uint64_t begin = 0, end = 0;
};

Parsed parse_entry(const std::string& origin, const std::string& name, const json& e,
                   uint64_t data_size) {
  auto fail = [&](const auto&... parts) -> Error {
    return Error(str("safetensors '", origin, "': tensor '", printable(name), "': ", parts...));
  };
  if (name.empty()) throw fail("empty tensor name");
  if (!is_valid_utf8(name)) throw fail("tensor name is not valid UTF-8");
  if (!e.is_object()) throw fail("entry is not a JSON object");

  Parsed p;
  p.info.name = name;
  p.info.file = origin;

  auto dt = e.find("dtype");
  if (dt == e.end()) throw fail("missing 'dtype'");
  if (!dt->is_string()) throw fail("'dtype' is not a string");
  const auto& dts = dt->get_ref<const std::string&>();
  if (!dtype_from_safetensors(dts, &p.info.dtype))
    throw fail("unknown dtype '", printable(dts),
               "' (known: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U8 BOOL)");

  auto sh = e.find("shape");
  if (sh == e.end()) throw fail("missing 'shape'");
  if (!sh->is_array()) throw fail("'shape' is not an array");
  if (sh->size() > kSafetensorsMaxRank)
    throw fail("shape has ", sh->size(), " dimensions (at most ", kSafetensorsMaxRank, ")");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    uint64_t v;
    if (!get_u64(d, &v) || v > static_cast<uint64_t>(INT64_MAX))
      throw fail("shape entry ", describe(d), " is not a non-negative integer");
    p.info.shape.push_back(static_cast<int64_t>(v));
    if (!overflow && __builtin_mul_overflow(numel, v, &numel)) overflow = true;
  }
  // A zero extent makes the product 0 even if an earlier partial product overflowed.
  if (std::find(p.info.shape.begin(), p.info.shape.end(), 0) != p.info.shape.end()) {
    numel = 0;
    overflow = false;
  }
  uint64_t expect_bytes = 0;
  if (overflow || __builtin_mul_overflow(numel, dtype_size(p.info.dtype), &expect_bytes) ||
      numel > static_cast<uint64_t>(INT64_MAX))
    throw fail("shape ", shape_str(p.info.shape), " is too large (element count overflows)");

  auto off = e.find("data_offsets");
  if (off == e.end()) throw fail("missing 'data_offsets'");
  if (!off->is_array() || off->size() != 2 || !get_u64((*off)[0], &p.begin) ||
      !get_u64((*off)[1], &p.end))
    throw fail("'data_offsets' must be [begin, end] with non-negative integers, got ",
               describe(*off));
  if (p.begin > p.end) throw fail("data_offsets begin ", p.begin, " > end ", p.end);
  if (p.end > data_size)
    throw fail("data_offsets [", p.begin, ", ", p.end, "] run past the data section (", data_size,
               " bytes; file truncated?)");
  if (p.end - p.begin != expect_bytes)
    throw fail("byte size ", p.end - p.begin, " does not match dtype ", dts, " x shape ",
               shape_str(p.info.shape), " = ", expect_bytes, " bytes");
  p.info.nbytes = static_cast<size_t>(expect_bytes);
  return p;
}

}  // namespace

SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& origin) {
  auto fail = [&](const auto&... parts) -> Error {
    return Error(str("safetensors '", origin, "': ", parts...));
  };
  if (size < 8) throw fail("file is ", size, " bytes, too small for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kSafetensorsMaxHeader)
    throw fail("header length ", n, " is absurd (limit ", kSafetensorsMaxHeader,
               " bytes); not a safetensors file?");
  if (n > size - 8)
    throw fail("header length ", n, " runs past the end of the file (", size,
               " bytes); file truncated?");
  if (n < 2) throw fail("header length ", n, " is too small for a JSON object");

  const char* hp = reinterpret_cast<const char*>(data + 8);
  if (hp[0] != '{') throw fail("header does not start with '{'; not a safetensors file?");
  if (const size_t bad = utf8_error_offset(std::string_view(hp, n)); bad != n) {
    // Name the tensor entry holding the bad bytes when possible: the nearest '"' before them.
    const std::string_view before(hp, bad);
    const size_t q = before.rfind('"');
    throw fail("header is not valid UTF-8 at byte ", bad, " (after '",
               printable(before.substr(q == std::string_view::npos ? 0 : q + 1)),
               "'); tensor names and metadata must be UTF-8");
  }
  json header = json::parse(hp, hp + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    // Re-parse with exceptions only to get the position and reason for the message.
    std::string why = "malformed JSON";
    try {
      const json again = json::parse(hp, hp + n);
      (void)again;
    } catch (const json::exception& ex) {
      why = ex.what();
    }
    throw fail("header is not valid JSON: ", printable(why, 400));
  }
  if (!header.is_object()) throw fail("header is not a JSON object");

  SafetensorsHeader out;
  out.data_offset = 8 + static_cast<size_t>(n);
  const uint64_t data_size = size - out.data_offset;
  const uint8_t* base = data + out.data_offset;

  std::vector<Parsed> entries;
  entries.reserve(header.size());
  // nlohmann's object keeps the last of duplicate keys silently, so duplicates are found with a
  // SAX pass over the raw header instead.
  {
    struct DupFinder : nlohmann::json_sax<json> {
      int depth = 0;
      std::set<std::string> seen;
      std::string dup;
      bool null() override { return true; }
      bool boolean(bool) override { return true; }
      bool number_integer(number_integer_t) override { return true; }
      bool number_unsigned(number_unsigned_t) override { return true; }
      bool number_float(number_float_t, const string_t&) override { return true; }
      bool string(string_t&) override { return true; }
      bool binary(binary_t&) override { return true; }
      bool start_object(std::size_t) override { return ++depth, true; }
      bool end_object() override { return --depth, true; }
      bool start_array(std::size_t) override { return ++depth, true; }
      bool end_array() override { return --depth, true; }
      bool key(string_t& k) override {
        if (depth == 1 && !seen.insert(k).second) {
          dup = k;
          return false;
        }
        return true;
      }
      bool parse_error(std::size_t, const std::string&,
                       const nlohmann::detail::exception&) override {
        return false;
      }
    } finder;
    json::sax_parse(hp, hp + n, &finder);
    if (!finder.dup.empty())
      throw fail("tensor '", printable(finder.dup), "' appears twice in the header");
  }

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("'__metadata__' is not a JSON object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          throw fail("'__metadata__' value for '", printable(k), "' is not a string");
        out.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_entry(origin, name, entry, data_size));
  }

  // Overlap check: sort by begin; zero-byte tensors own no bytes and never overlap.
  std::sort(entries.begin(), entries.end(), [](const Parsed& a, const Parsed& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Parsed* prev = nullptr;
  for (const auto& e : entries) {
    if (e.begin == e.end) continue;
    if (prev && e.begin < prev->end)
      throw fail("tensors '", printable(prev->info.name), "' [", prev->begin, ", ", prev->end,
                 ") and '", printable(e.info.name), "' [", e.begin, ", ", e.end,
                 ") overlap in the data section");
    prev = &e;
  }

  out.tensors.reserve(entries.size());
  for (auto& e : entries) {
    e.info.data = base + e.begin;
    out.tensors.push_back(std::move(e.info));
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  header_ = parse_safetensors(map_.data(), map_.size(), path);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace dfl
