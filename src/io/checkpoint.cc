#include "io/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/mmap.h"

namespace dfl {

namespace fs = std::filesystem;
using nlohmann::json;

std::string DTypeSet::to_string() const {
  static constexpr DType kAll[] = {DType::kF32,    DType::kBF16, DType::kF16,  DType::kF8E4M3,
                                   DType::kF8E5M2, DType::kI8,   DType::kI16,  DType::kI32,
                                   DType::kI64,    DType::kU8,   DType::kBool, DType::kF64};
  std::string s;
  for (DType t : kAll) {
    if (!contains(t)) continue;
    if (!s.empty()) s += " or ";
    s += dtype_name(t);
  }
  return s.empty() ? "(none)" : s;
}

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Shard names come from a JSON file: keep them inside the checkpoint folder.
bool safe_relative_path(const std::string& p) {
  if (p.empty() || p[0] == '/' || p.find('\0') != std::string::npos) return false;
  for (const auto& part : fs::path(p)) {
    if (part == "..") return false;
  }
  return true;
}

std::vector<std::string> list_files(const std::string& dir, std::string_view suffix) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (ends_with(name, suffix) && file_exists(it->path().string())) out.push_back(name);
  }
  DFL_CHECK(!ec, "cannot list checkpoint folder '", dir, "': ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  DFL_CHECK(dir_exists(dir), "checkpoint folder '", dir, "' does not exist or is not a folder");
  const fs::path d(dir);
  if (file_exists((d / "model.safetensors").string())) {
    add_file((d / "model.safetensors").string());
  } else if (file_exists((d / "model.safetensors.index.json").string())) {
    open_index((d / "model.safetensors.index.json").string());
  } else {
    const auto indexes = list_files(dir, ".safetensors.index.json");
    if (indexes.size() > 1) {
      std::string all;
      for (const auto& i : indexes) all += " " + i;
      throw Error(str("checkpoint folder '", dir, "' has several safetensors index files (",
                      all.substr(1), "); keep only one"));
    }
    if (indexes.size() == 1) {
      open_index((d / indexes[0]).string());
    } else {
      const auto shards = list_files(dir, ".safetensors");
      DFL_CHECK(!shards.empty(), "checkpoint folder '", dir,
                "' has no model.safetensors, no *.safetensors.index.json and no *.safetensors");
      for (const auto& s : shards) add_file((d / s).string());
    }
  }

  for (const auto& f : files_)
    for (const auto& t : f->tensors()) tensors_.push_back(&t);
  index_tensors();
  for (const auto& f : files_)
    for (const auto& [k, v] : f->metadata()) metadata_.emplace(k, v);
}

Checkpoint::Checkpoint(const std::string& gguf_path,
                       const std::function<std::string(std::string_view)>& rename,
                       const RowOrder& row_order)
    : dir_(gguf_path), gguf_(std::make_unique<GgufFile>(gguf_path)) {
  gguf_tensors_.reserve(gguf_->tensors().size());
  for (const GgufTensor& t : gguf_->tensors()) {
    std::string name = rename(t.name);
    if (name.empty()) continue;
    TensorInfo ti;
    ti.name = std::move(name);
    ti.dtype = t.dtype(gguf_path);
    ti.shape = t.ne.size() <= 1 ? t.shape() : std::vector<int64_t>{t.rows(), t.cols()};
    ti.data = t.data;
    ti.nbytes = t.nbytes;
    ti.file = gguf_path;
    if (row_order && ti.shape.size() == 2) {
      const int64_t rows = ti.shape[0];
      const std::vector<int64_t> order = row_order(*gguf_, t.name, rows);
      if (!order.empty()) {
        DFL_CHECK(int64_t(order.size()) == rows && rows > 0 && ti.nbytes % rows == 0, "GGUF '",
                  gguf_path, "': bad row order for tensor '", t.name, "'");
        const size_t row_bytes = ti.nbytes / rows;
        auto buf = std::make_unique<uint8_t[]>(ti.nbytes);
        for (int64_t r = 0; r < rows; ++r) {
          DFL_CHECK(order[r] >= 0 && order[r] < rows, "GGUF '", gguf_path, "': row order of '",
                    t.name, "' out of range");
          std::memcpy(buf.get() + r * row_bytes, ti.data + order[r] * row_bytes, row_bytes);
        }
        ti.data = buf.get();
        reordered_.push_back(std::move(buf));
      }
    }
    gguf_tensors_.push_back(std::move(ti));
  }
  for (const auto& t : gguf_tensors_) tensors_.push_back(&t);
  index_tensors();
}

void Checkpoint::index_tensors() {
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    DFL_CHECK(tensors_[i - 1]->name != tensors_[i]->name, "checkpoint '", dir_, "': tensor '",
              tensors_[i]->name, "' is stored twice (in '", tensors_[i - 1]->file, "' and '",
              tensors_[i]->file, "')");
  }
  used_ = std::make_unique<std::atomic<bool>[]>(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) used_[i].store(false, std::memory_order_relaxed);
}

std::string gguf_file(const std::string& path) {
  if (ends_with(path, ".gguf")) return path;
  if (!dir_exists(path)) return "";
  if (!list_files(path, ".safetensors").empty()) return "";
  const auto g = list_files(path, ".gguf");
  if (g.empty()) return "";
  if (g.size() > 1) {
    std::string all;
    for (const auto& x : g) all += " " + x;
    throw Error(str("folder '", path, "' holds several GGUF files (", all.substr(1),
                    "): pass the one to use"));
  }
  return (fs::path(path) / g[0]).string();
}

void Checkpoint::add_file(const std::string& path) {
  files_.push_back(std::make_unique<SafetensorsFile>(path));
}

void Checkpoint::open_index(const std::string& index_path) {
  json idx = json::parse(read_text_file(index_path), nullptr, /*allow_exceptions=*/false);
  DFL_CHECK(!idx.is_discarded(), "checkpoint index '", index_path, "' is not valid JSON");
  DFL_CHECK(idx.is_object(), "checkpoint index '", index_path, "' is not a JSON object");
  auto wm = idx.find("weight_map");
  DFL_CHECK(wm != idx.end() && wm->is_object(), "checkpoint index '", index_path,
            "' has no \"weight_map\" object");

  const fs::path d(dir_);
  std::map<std::string, size_t> shard_file;                  // shard name → index in files_
  std::vector<std::pair<std::string, std::string>> entries;  // tensor → shard
  for (const auto& [name, shard] : wm->items()) {
    DFL_CHECK(shard.is_string(), "checkpoint index '", index_path, "': tensor '", name,
              "' maps to a non-string shard");
    const auto& s = shard.get_ref<const std::string&>();
    DFL_CHECK(safe_relative_path(s), "checkpoint index '", index_path, "': tensor '", name,
              "' maps to shard '", s, "', which is not a relative path inside the folder");
    entries.emplace_back(name, s);
    if (shard_file.count(s)) continue;
    const std::string path = (d / s).string();
    DFL_CHECK(file_exists(path), "checkpoint index '", index_path, "' names shard '", s,
              "' (for tensor '", name, "'), but '", path, "' does not exist");
    shard_file[s] = files_.size();
    add_file(path);
  }
  DFL_CHECK(!entries.empty(), "checkpoint index '", index_path, "' has an empty weight_map");
  for (const auto& [name, shard] : entries) {
    const auto& f = *files_[shard_file[shard]];
    if (f.find(name)) continue;
    std::string where;
    for (const auto& other : files_)
      if (other->find(name)) where = str(" (it is in '", other->path(), "')");
    throw Error(str("checkpoint index '", index_path, "' says tensor '", name, "' is in '", shard,
                    "', but that shard does not hold it", where));
  }
}

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

size_t Checkpoint::index_of(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo* t, std::string_view n) { return t->name < n; });
  if (it == tensors_.end() || (*it)->name != name) return std::string::npos;
  return static_cast<size_t>(it - tensors_.begin());
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const size_t i = index_of(name);
  if (i == std::string::npos) return nullptr;
  used_[i].store(true, std::memory_order_relaxed);
  return tensors_[i];
}

bool Checkpoint::contains(std::string_view name) const {
  return index_of(name) != std::string::npos;
}

const TensorInfo& Checkpoint::require(std::string_view name, DTypeSet allowed,
                                      std::vector<int64_t> shape) const {
  const TensorInfo* t = find(name);
  DFL_CHECK(t, "tensor '", name, "' (expected shape ", shape_str(shape), ") is missing from '",
            dir_, "'");
  DFL_CHECK(allowed.contains(t->dtype), "tensor '", name, "': expected dtype ", allowed.to_string(),
            ", file has ", dtype_name(t->dtype), " (in '", t->file, "')");
  bool ok = shape.size() == t->shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || shape[i] == t->shape[i];
  DFL_CHECK(ok, "tensor '", name, "': expected shape ", shape_str(shape), ", file has ",
            shape_str(t->shape), " (in '", t->file, "')");
  return *t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto* t : tensors_) out.push_back(t->name);
  return out;
}

std::vector<std::string> Checkpoint::unused_names(
    const std::vector<std::string>& ignore_prefixes) const {
  std::vector<std::string> out;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (used_[i].load(std::memory_order_relaxed)) continue;
    const std::string& n = tensors_[i]->name;
    bool skip = false;
    for (const auto& p : ignore_prefixes) skip = skip || n.compare(0, p.size(), p) == 0;
    if (!skip) out.push_back(n);
  }
  return out;
}

}  // namespace dfl
