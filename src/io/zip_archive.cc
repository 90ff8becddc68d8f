#include "io/zip_archive.h"

#include <zip.h>

#include <algorithm>

#include "core/error.h"

namespace dfl {

ZipArchive ZipArchive::open_file(const std::string& path) {
  ZipArchive a;
  a.origin_ = path;
  a.map_ = std::make_unique<MappedFile>(path);
  a.open(a.map_->data(), a.map_->size());
  return a;
}

ZipArchive ZipArchive::open_memory(const uint8_t* data, size_t size, const std::string& origin) {
  ZipArchive a;
  a.origin_ = origin;
  a.open(data, size);
  return a;
}

void ZipArchive::open(const uint8_t* data, size_t size) {
  DFL_CHECK(size > 0, "'", origin_, "' is empty, not a zip archive");
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(data, size, 0, &err);
  if (!src) {
    std::string msg = zip_error_strerror(&err);
    zip_error_fini(&err);
    throw Error(str("cannot read '", origin_, "' as a zip archive: ", msg));
  }
  za_ = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (!za_) {
    zip_source_free(src);
    std::string msg = zip_error_strerror(&err);
    zip_error_fini(&err);
    throw Error(str("'", origin_, "' is not a valid zip archive (torch.save format): ", msg));
  }
  zip_error_fini(&err);
  const zip_int64_t n = zip_get_num_entries(za_, 0);
  DFL_CHECK(n >= 0, "cannot list entries of '", origin_, "'");
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    DFL_CHECK(zip_stat_index(za_, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW, &st) == 0,
              "cannot read entry ", i, " of '", origin_, "': ", zip_strerror(za_));
    DFL_CHECK((st.valid & ZIP_STAT_NAME) && (st.valid & ZIP_STAT_SIZE), "entry ", i, " of '",
              origin_, "' has no name or size");
    names_.emplace_back(st.name);
    sizes_.push_back(st.size);
    index_.emplace(names_.back(), names_.size() - 1);
  }
}

ZipArchive::ZipArchive(ZipArchive&& o) noexcept
    : map_(std::move(o.map_)),
      za_(o.za_),
      origin_(std::move(o.origin_)),
      names_(std::move(o.names_)),
      sizes_(std::move(o.sizes_)),
      index_(std::move(o.index_)) {
  o.za_ = nullptr;
}

ZipArchive& ZipArchive::operator=(ZipArchive&& o) noexcept {
  if (this != &o) {
    if (za_) zip_discard(za_);
    za_ = o.za_;
    o.za_ = nullptr;
    map_ = std::move(o.map_);
    origin_ = std::move(o.origin_);
    names_ = std::move(o.names_);
    sizes_ = std::move(o.sizes_);
    index_ = std::move(o.index_);
  }
  return *this;
}

ZipArchive::~ZipArchive() {
  // Read-only: discard, never write back.
  if (za_) zip_discard(za_);
}

std::optional<size_t> ZipArchive::locate(std::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::string ZipArchive::read(size_t i, uint64_t max_bytes) const {
  DFL_CHECK(i < names_.size(), "zip entry index ", i, " out of range in '", origin_, "'");
  const uint64_t size = sizes_[i];
  DFL_CHECK(size <= max_bytes, "'", origin_, "': entry '", names_[i], "' is ", size,
            " bytes, more than the limit of ", max_bytes);
  zip_file_t* f = zip_fopen_index(za_, i, 0);
  DFL_CHECK(f, "'", origin_, "': cannot open entry '", names_[i], "': ", zip_strerror(za_));
  // Grow as data actually arrives instead of trusting the declared size for one big allocation:
  // a forged header can declare gigabytes in a tiny file.
  std::string out;
  uint64_t got = 0;
  while (got < size) {
    const uint64_t chunk = std::min<uint64_t>(size - got, 1u << 20);
    out.resize(static_cast<size_t>(got + chunk));
    const zip_int64_t r = zip_fread(f, out.data() + got, chunk);
    if (r <= 0) break;
    got += static_cast<uint64_t>(r);
  }
  out.resize(static_cast<size_t>(got));
  // One more read must hit the end cleanly; this is also where libzip reports a CRC mismatch.
  char extra;
  const zip_int64_t tail = got == size ? zip_fread(f, &extra, 1) : -1;
  std::string why = tail < 0 ? zip_file_strerror(f) : "";
  zip_fclose(f);
  DFL_CHECK(got == size, "'", origin_, "': entry '", names_[i], "' is truncated (", got, " of ",
            size, " bytes)", why.empty() ? "" : ": ", why);
  DFL_CHECK(tail == 0, "'", origin_, "': entry '", names_[i], "' ",
            tail > 0 ? "is longer than its declared size" : "is corrupt: ", why);
  return out;
}

}  // namespace dfl
