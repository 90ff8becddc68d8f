// Shared test helpers for the model / spec / engine suites: golden tensors read through the
// engine's own safetensors reader, error measures, temp folders and a tiny safetensors writer.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace dfl::test {

// Repository root: $DFL_ROOT (set by ctest) or the working directory.
inline std::string repo_root() {
  const char* r = std::getenv("DFL_ROOT");
  return r && *r ? std::string(r) : std::filesystem::current_path().string();
}
inline std::string fixture(const std::string& rel) { return repo_root() + "/tests/fixtures/" + rel; }

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  DFL_CHECK(f.good(), "cannot open ", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
inline nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_text(path));
}

// A golden.safetensors file: typed copies of its tensors.
class Golden {
 public:
  explicit Golden(const std::string& path) : file_(path) {}
  bool has(const std::string& name) const { return file_.find(name) != nullptr; }
  std::vector<int64_t> shape(const std::string& name) const { return get(name).shape; }
  std::vector<float> f32(const std::string& name) const {
    const TensorInfo& t = get(name);
    DFL_CHECK(t.dtype == DType::kF32, "golden tensor ", name, " is not F32");
    std::vector<float> out(t.numel());
    std::memcpy(out.data(), t.data, t.nbytes);
    return out;
  }
  std::vector<int32_t> i32(const std::string& name) const {
    const TensorInfo& t = get(name);
    DFL_CHECK(t.dtype == DType::kI32, "golden tensor ", name, " is not I32");
    std::vector<int32_t> out(t.numel());
    std::memcpy(out.data(), t.data, t.nbytes);
    return out;
  }
  std::vector<int64_t> i64(const std::string& name) const {
    const TensorInfo& t = get(name);
    DFL_CHECK(t.dtype == DType::kI64, "golden tensor ", name, " is not I64");
    std::vector<int64_t> out(t.numel());
    std::memcpy(out.data(), t.data, t.nbytes);
    return out;
  }
  int32_t scalar_i32(const std::string& name) const { return i32(name).at(0); }

 private:
  const TensorInfo& get(const std::string& name) const {
    const TensorInfo* t = file_.find(name);
    DFL_CHECK(t, "golden tensor ", name, " missing in ", file_.path());
    return *t;
  }
  SafetensorsFile file_;
};

// max |a - b| over n elements (NaN counts as infinite error).
inline double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d == d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  return max_abs_diff(a.data(), b.data(), a.size());
}
inline double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float x : a) m = std::max(m, double(std::fabs(x)));
  return m;
}

// Row-wise argmax of a [rows, cols] matrix.
inline std::vector<int32_t> argmax_rows(const float* x, int64_t rows, int64_t cols) {
  std::vector<int32_t> out(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * cols;
    out[r] = static_cast<int32_t>(std::max_element(p, p + cols) - p);
  }
  return out;
}

// A fresh folder under the system temp dir, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("dfl_t_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
}

// Copies every regular file of `src` into `dst` (flat).
inline void copy_folder(const std::string& src, const std::string& dst) {
  std::filesystem::create_directories(dst);
  for (const auto& e : std::filesystem::directory_iterator(src))
    if (e.is_regular_file())
      std::filesystem::copy_file(e.path(), std::filesystem::path(dst) / e.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
}

// A tensor to write: raw bytes with a dtype and shape.
struct StTensor {
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;
};

// Reads every tensor of a safetensors file (for re-writing edited copies).
inline std::map<std::string, StTensor> read_st(const std::string& path) {
  SafetensorsFile f(path);
  std::map<std::string, StTensor> out;
  for (const auto& t : f.tensors())
    out[t.name] = StTensor{dtype_name(t.dtype), t.shape,
                           std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
  return out;
}

// Writes a well-formed safetensors file (header padded to 8 bytes).
inline void write_st(const std::string& path, const std::map<std::string, StTensor>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    h[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string header = h.dump();
  while (header.size() % 8) header += ' ';
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  write_text(path, out + header + data);
}

}  // namespace dfl::test
