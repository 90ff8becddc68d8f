// Test helper: builds GGUF bytes by hand (so malformed variants can be made).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dfl::test {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3, uint32_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  // Raw metadata pair: the value bytes are written as given (type tag included by the caller).
  void kv_raw(const std::string& key, uint32_t type, const std::string& value_bytes) {
    std::string b = str(key);
    put(b, type);
    b += value_bytes;
    kvs_ += b;
    ++n_kv_;
  }
  void kv_u32(const std::string& k, uint32_t v) { kv_raw(k, 4, pod(v)); }
  void kv_i32(const std::string& k, int32_t v) { kv_raw(k, 5, pod(v)); }
  void kv_f32(const std::string& k, float v) { kv_raw(k, 6, pod(v)); }
  void kv_bool(const std::string& k, bool v) { kv_raw(k, 7, std::string(1, v ? 1 : 0)); }
  void kv_str(const std::string& k, const std::string& v) { kv_raw(k, 8, str(v)); }
  void kv_u64(const std::string& k, uint64_t v) { kv_raw(k, 10, pod(v)); }
  void kv_f64(const std::string& k, double v) { kv_raw(k, 12, pod(v)); }
  void kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    std::string b = pod(uint32_t(8)) + pod(uint64_t(v.size()));
    for (const auto& s : v) b += str(s);
    kv_raw(k, 9, b);
  }
  template <typename T>
  void kv_array(const std::string& k, uint32_t elem_type, const std::vector<T>& v) {
    std::string b = pod(elem_type) + pod(uint64_t(v.size()));
    for (const T& x : v) b += pod(x);
    kv_raw(k, 9, b);
  }

  // Tensor: ne in ggml order; data appended (padded to the alignment) unless offset >= 0.
  void tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t ggml_type,
              const std::string& bytes, int64_t offset = -1) {
    std::string b = str(name);
    put(b, uint32_t(ne.size()));
    for (uint64_t d : ne) put(b, d);
    put(b, ggml_type);
    while (data_.size() % alignment_) data_ += '\0';
    put(b, uint64_t(offset >= 0 ? uint64_t(offset) : data_.size()));
    data_ += bytes;
    infos_ += b;
    ++n_tensors_;
  }

  std::string build() const {
    std::string out = "GGUF";
    put(out, version_);
    put(out, n_tensors_);
    put(out, n_kv_);
    out += kvs_;
    out += infos_;
    while (out.size() % alignment_) out += '\0';
    return out + data_;
  }
  // Size of everything before the tensor infos (for tests that poke at the bytes).
  size_t kv_end() const { return 24 + kvs_.size(); }

  template <typename T>
  static std::string pod(const T& v) {
    std::string s(sizeof(T), '\0');
    std::memcpy(s.data(), &v, sizeof(T));
    return s;
  }
  static std::string str(const std::string& s) { return pod(uint64_t(s.size())) + s; }

 private:
  template <typename T>
  static void put(std::string& b, const T& v) { b += pod(v); }
  uint32_t version_, alignment_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
  std::string kvs_, infos_, data_;
};

}  // namespace dfl::test
