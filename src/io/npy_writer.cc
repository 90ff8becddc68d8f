#include "io/npy_writer.h"

#include <cstdio>
#include <memory>

#include "core/error.h"

namespace dfl {

namespace {
size_t itemsize(const std::string& dtype) {
  if (dtype == "<i4" || dtype == "<f4") return 4;
  if (dtype == "<u2") return 2;
  DFL_CHECK(false, "write_npy: unsupported dtype '", dtype, "'");
  return 0;
}
}  // namespace

void write_npy(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  size_t n = 1;
  std::string sh = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    n *= size_t(shape[i]);
    sh += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  }
  sh += ")";
  DFL_CHECK(n * itemsize(dtype) == bytes, "write_npy: ", bytes, " bytes do not match shape ", sh);
  std::string header = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': " + sh + ", }";
  // magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64
  // and ended by '\n'.
  const size_t total = ((10 + header.size() + 1 + 63) / 64) * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  DFL_CHECK(f, "cannot write '", path, "'");
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                 static_cast<unsigned char>(header.size() & 0xff),
                                 static_cast<unsigned char>(header.size() >> 8)};
  bool ok = std::fwrite(pre, 1, 10, f.get()) == 10 &&
            std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f.get()) == bytes);
  DFL_CHECK(ok, "write error on '", path, "'");
}

}  // namespace dfl
