// A checkpoint folder: every safetensors tensor of a model, by name, memory-mapped (no copies).
//
// Which files make up the checkpoint (first rule that applies):
//   1. `model.safetensors`                       — one file;
//   2. `model.safetensors.index.json`            — the shards named by its "weight_map";
//   3. exactly one `*.safetensors.index.json`     — same (e.g. MiMo's
//                                                   `dflash_draft_model.safetensors.index.json`);
//   4. otherwise every `*.safetensors` in the folder (sorted by name).
// With an index, every shard it names is opened once; a missing shard, a tensor absent from the
// shard the index names, or a shard path escaping the folder is a dfl::Error. A tensor stored in
// two files is an error in every mode.
//
// A GGUF file (llama.cpp's format) is a checkpoint too: gguf_file() finds it (a `.gguf` path, or
// a folder whose only weights are one `.gguf`), and the GGUF constructor exposes its tensors under
// the names a family's `rename` gives them (e.g. "blk.0.attn_q.weight" → the HF name), in torch
// shape order, with their GGML dtypes (block-quantized data stays as stored).
//
// Requests are tracked: every tensor returned by find()/require() is marked used, so the model
// loader can list leftovers with unused_names() (ignoring prefixes such as "model.mtp.").
// Tracking uses relaxed atomics, so concurrent lookups are safe; the object is otherwise immutable.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include <functional>

#include "io/gguf.h"
#include "io/safetensors.h"

namespace dfl {

// A small set of dtypes accepted for one tensor, e.g. DTypeSet{DType::kBF16, DType::kF32}.
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> types) {
    for (DType t : types) bits_ |= bit(t);
  }
  constexpr DTypeSet(DType t) : bits_(bit(t)) {}  // NOLINT: implicit on purpose
  static constexpr DTypeSet any() {
    DTypeSet s;
    s.bits_ = ~0u;
    return s;
  }
  constexpr bool contains(DType t) const { return (bits_ & bit(t)) != 0; }
  // "BF16 or F32" for messages.
  std::string to_string() const;

 private:
  static constexpr uint32_t bit(DType t) { return 1u << static_cast<unsigned>(t); }
  uint32_t bits_ = 0;
};

// Float dtypes a weight matrix may be stored in.
inline constexpr DTypeSet kFloatWeights{DType::kF32, DType::kBF16, DType::kF16};
// Float or GGML block dtypes (GGUF): what a matrix without side scales may be stored in.
inline constexpr DTypeSet kFloatOrBlockWeights{DType::kF32,  DType::kBF16, DType::kF16,
                                               DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                                               DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                                               DType::kQ5_K, DType::kQ6_K};

class Checkpoint {
 public:
  // Opens the folder `dir`; throws dfl::Error naming the folder/file/tensor on any problem.
  explicit Checkpoint(const std::string& dir);
  // Opens a GGUF file; every tensor is listed under rename(its GGUF name) ("" = skip it). When
  // row_order is given and returns a non-empty order for a 2-D tensor (rows = its outer extent),
  // the tensor is a copy whose row r is stored row order[r] (rows are whole quant blocks, so
  // this holds for every GGML type); others stay views into the mapping.
  using RowOrder = std::function<std::vector<int64_t>(const GgufFile&, std::string_view, int64_t)>;
  Checkpoint(const std::string& gguf_path,
             const std::function<std::string(std::string_view)>& rename,
             const RowOrder& row_order = nullptr);
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& dir() const { return dir_; }
  // The files opened, in order (paths include dir).
  std::vector<std::string> files() const;
  size_t size() const { return tensors_.size(); }

  // nullptr when absent. A found tensor is marked used.
  const TensorInfo* find(std::string_view name) const;
  // Like find(), but not marking the tensor used (for probing optional layouts).
  bool contains(std::string_view name) const;
  // The tensor, checked: missing, dtype not in `allowed`, or shape != `shape` throw dfl::Error,
  // e.g. "tensor 'x.weight': expected shape [64, 32], file has [64, 48]". A negative entry in
  // `shape` matches any extent at that position (the rank must still match).
  const TensorInfo& require(std::string_view name, DTypeSet allowed,
                            std::vector<int64_t> shape) const;

  // All tensor names, sorted.
  std::vector<std::string> names() const;
  // Names never returned by find()/require(), sorted, skipping those starting with any prefix.
  std::vector<std::string> unused_names(const std::vector<std::string>& ignore_prefixes = {}) const;
  // Merged "__metadata__" of all files (first file wins on conflicts).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The GGUF file behind a GGUF checkpoint (nullptr for safetensors).
  const GgufFile* gguf() const { return gguf_.get(); }

 private:
  void add_file(const std::string& path);
  void index_tensors();
  size_t index_of(std::string_view name) const;  // npos when absent
  void open_index(const std::string& index_path);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<const TensorInfo*> tensors_;  // sorted by name
  std::unique_ptr<std::atomic<bool>[]> used_;
  std::map<std::string, std::string> metadata_;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<TensorInfo> gguf_tensors_;  // renamed views into gguf_ (or into reordered_)
  std::vector<std::unique_ptr<uint8_t[]>> reordered_;  // tensors whose rows row_order moved
};

// The GGUF file `path` names: `path` itself when it ends in ".gguf", else the single "*.gguf" in
// the folder `path` when the folder has no safetensors; "" otherwise (several .gguf files in a
// safetensors-less folder are a dfl::Error naming them).
std::string gguf_file(const std::string& path);

}  // namespace dfl
