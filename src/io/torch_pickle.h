// Reader for torch.save files (zip archive + data.pkl), with a strict pickle whitelist.
//
// Like torch.load(weights_only=True), but narrower: the unpickler knows only the opcodes torch.save
// emits (protocol 2 plus MEMOIZE/FRAME/SHORT_BINUNICODE/BINUNICODE8 and a few harmless ones) and
// only these globals:
//   torch._utils._rebuild_tensor_v2 / _rebuild_tensor_v3 / _rebuild_parameter,
//   torch.<T>Storage (Float, Double, Half, BFloat16, Long, Int, Short, Char, Byte, Bool),
//   torch.storage.UntypedStorage (with a dtype passed to _rebuild_tensor_v3),
//   torch.<dtype> (float32, bfloat16, float16, float64, float8_e4m3fn, float8_e5m2, int8..int64,
//   uint8, bool), collections.OrderedDict.
// Anything else is refused before it could matter, e.g.
//   "refused: pickle global 'os.system' is not allowed"
// Nothing is ever executed. Every read is bounds-checked: opcode arguments, the stack and mark
// stack, memo indices, storage size vs storage_offset + strided extent, object counts, nesting
// depth and the bytes materialized. Any violation is a dfl::Error naming the file.
//
// Tensors are materialized: their elements are copied out of the storage (honoring storage_offset
// and strides) into contiguous row-major bytes. Only little-endian archives are accepted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace dfl {

// A tensor copied out of a .pt file.
struct PtTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;           // outermost first
  std::vector<int64_t> source_strides;  // strides (in elements) as stored, for information
  int64_t source_offset = 0;            // storage_offset as stored
  std::vector<uint8_t> data;            // contiguous row-major, dtype_size(dtype) * numel() bytes

  int64_t numel() const;
  // Elements converted to float (F32/F64/F16/BF16/F8 dtypes; integer dtypes are converted too).
  std::vector<float> to_f32() const;
};

struct PtEntry;

// A value from the pickle: the subset torch.save produces for tensors and containers.
struct PtValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kTensor };

  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                           // kString
  std::vector<PtValue> items;              // kList, kTuple
  std::vector<PtEntry> dict;               // kDict (also OrderedDict), insertion order;
                                           // keys are str or int; a repeated key (never
                                           // written by torch) stays a separate entry
  std::shared_ptr<const PtTensor> tensor;  // kTensor (shared: a tensor may appear twice)

  bool is_none() const { return kind == Kind::kNone; }
  bool is_tensor() const { return kind == Kind::kTensor; }
  bool is_dict() const { return kind == Kind::kDict; }
  // Dict lookup by string key (the last entry wins, as in Python); nullptr when absent or not a
  // dict.
  const PtValue* get(std::string_view key) const;
  // "dict", "tensor", ... for messages.
  static const char* kind_name(Kind k);
};

struct PtEntry {
  PtValue key;
  PtValue value;
};

struct PtReadLimits {
  uint64_t max_pickle_bytes = 64ull << 20;       // data.pkl
  uint64_t max_total_tensor_bytes = 8ull << 30;  // materialized tensor bytes, all tensors
  uint64_t max_objects = 4u << 20;               // values created while unpickling
  int max_depth = 64;                            // container nesting of the result
};

// Reads a torch.save file. Throws dfl::Error on anything malformed or refused.
PtValue read_torch_file(const std::string& path, const PtReadLimits& limits = {});
// Same, for an in-memory archive (fuzzing, tests). `origin` names it in messages.
PtValue read_torch_bytes(const uint8_t* data, size_t size, const std::string& origin,
                         const PtReadLimits& limits = {});

// The unpickler alone: `pkl` is a data.pkl stream; storages are fetched through `load_storage`
// (key → raw bytes, or throw). Exposed for tests and fuzzing of the VM without a zip around it.
using StorageLoader = std::string (*)(void* ctx, const std::string& key, uint64_t max_bytes);
PtValue unpickle_torch(std::string_view pkl, const std::string& origin, StorageLoader load_storage,
                       void* ctx, const PtReadLimits& limits = {});

// The DFlash drafter's optional mask_embedding.pt (DFLASH-SPEC §3.2): a bare tensor or a dict
// {"embedding": tensor, "mask_token_id": int}.
struct MaskEmbedding {
  std::vector<float> values;             // [hidden_size]
  std::optional<int64_t> mask_token_id;  // from the file, when it had one
};
// Reads and checks it: numel must equal hidden_size (any shape is flattened); a file id that
// disagrees with `config_mask_token_id` is a dfl::Error.
MaskEmbedding read_mask_embedding(const std::string& path, int64_t hidden_size,
                                  std::optional<int64_t> config_mask_token_id);

}  // namespace dfl
