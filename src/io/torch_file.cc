// torch.save archives: locating data.pkl and the storages inside the zip, and the DFlash
// mask_embedding.pt helper. The pickle VM itself is in torch_pickle.cc.
#include <algorithm>

#include "core/error.h"
#include "io/torch_pickle.h"
#include "io/zip_archive.h"

namespace dfl {

const PtValue* PtValue::get(std::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  for (auto it = dict.rbegin(); it != dict.rend(); ++it)
    if (it->key.kind == Kind::kString && it->key.s == key) return &it->value;
  return nullptr;
}

const char* PtValue::kind_name(Kind k) {
  static const char* kNames[] = {"None", "bool",  "int",  "float", "str",
                                 "list", "tuple", "dict", "tensor"};
  return kNames[static_cast<int>(k)];
}

namespace {

struct ArchiveCtx {
  const ZipArchive* zip;
  std::string prefix;  // "archive/" (the top folder's name varies)
};

std::string load_from_zip(void* ctx, const std::string& key, uint64_t max_bytes) {
  const auto* a = static_cast<ArchiveCtx*>(ctx);
  const std::string name = a->prefix + "data/" + key;
  auto i = a->zip->locate(name);
  DFL_CHECK(i, "'", a->zip->origin(), "': storage entry '", name, "' is missing");
  return a->zip->read(*i, max_bytes);
}

PtValue read_archive(const ZipArchive& zip, const PtReadLimits& limits) {
  const std::string& origin = zip.origin();
  std::vector<size_t> pkls;
  for (size_t i = 0; i < zip.names().size(); ++i) {
    const std::string& n = zip.names()[i];
    const size_t slash = n.find('/');
    if (slash != std::string::npos && slash > 0 && n.substr(slash) == "/data.pkl")
      pkls.push_back(i);
  }
  DFL_CHECK(!pkls.empty(), "'", origin,
            "' has no <name>/data.pkl entry: not a torch.save file (or a legacy pre-1.6 one; "
            "re-save it with a current torch)");
  DFL_CHECK(pkls.size() == 1, "'", origin, "' has ", pkls.size(), " data.pkl entries");
  const std::string& pkl_name = zip.names()[pkls[0]];
  ArchiveCtx ctx{&zip, pkl_name.substr(0, pkl_name.size() - std::string("data.pkl").size())};

  if (auto bo = zip.locate(ctx.prefix + "byteorder")) {
    std::string order = zip.read(*bo, 64);
    while (!order.empty() && (order.back() == '\n' || order.back() == '\r')) order.pop_back();
    DFL_CHECK(order == "little", "'", origin, "' was saved with byteorder '", order.substr(0, 16),
              "'; only little-endian files are supported");
  }
  const std::string pkl = zip.read(pkls[0], limits.max_pickle_bytes);
  return unpickle_torch(pkl, origin, &load_from_zip, &ctx, limits);
}

}  // namespace

PtValue read_torch_file(const std::string& path, const PtReadLimits& limits) {
  const ZipArchive zip = ZipArchive::open_file(path);
  return read_archive(zip, limits);
}

PtValue read_torch_bytes(const uint8_t* data, size_t size, const std::string& origin,
                         const PtReadLimits& limits) {
  const ZipArchive zip = ZipArchive::open_memory(data, size, origin);
  return read_archive(zip, limits);
}

MaskEmbedding read_mask_embedding(const std::string& path, int64_t hidden_size,
                                  std::optional<int64_t> config_mask_token_id) {
  const PtValue v = read_torch_file(path);
  MaskEmbedding out;
  const PtValue* emb = &v;
  if (v.is_dict()) {
    emb = v.get("embedding");
    if (!emb) {
      std::string keys;
      for (const auto& [k, x] : v.dict)
        keys += (keys.empty() ? "" : ", ") + (k.kind == PtValue::Kind::kString ? k.s : "?");
      throw Error(str("mask embedding '", path,
                      "' is a dict without an 'embedding' entry (keys: ", keys, ")"));
    }
    if (const PtValue* id = v.get("mask_token_id"); id && !id->is_none()) {
      DFL_CHECK(id->kind == PtValue::Kind::kInt, "mask embedding '", path,
                "': 'mask_token_id' is a ", PtValue::kind_name(id->kind), ", expected an int");
      out.mask_token_id = id->i;
    }
  }
  DFL_CHECK(emb->is_tensor(), "mask embedding '", path, "' holds a ", PtValue::kind_name(emb->kind),
            "; expected a tensor or {'embedding': tensor, 'mask_token_id': int}");
  const PtTensor& t = *emb->tensor;
  const DType dt = t.dtype;
  DFL_CHECK(dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16 || dt == DType::kF64,
            "mask embedding '", path, "' has dtype ", dtype_name(dt), "; expected a float tensor");
  DFL_CHECK(
      t.numel() == hidden_size, "mask embedding '", path, "' has ", t.numel(), " elements (shape ",
      [&] {
        std::string s;
        for (int64_t d : t.shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
        return "[" + s + "]";
      }(),
      "), but the drafter's hidden_size is ", hidden_size);
  if (out.mask_token_id && config_mask_token_id)
    DFL_CHECK(*out.mask_token_id == *config_mask_token_id, "mask embedding '", path,
              "' is for mask_token_id ", *out.mask_token_id, ", but the drafter config says ",
              *config_mask_token_id);
  out.values = t.to_f32();
  return out;
}

}  // namespace dfl
