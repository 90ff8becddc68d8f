#include "model/weights.h"

#include "core/error.h"

namespace dfl {

namespace {
// What a Linear weight may be stored as: float, FP8 with block scales, or a GGML block format.
constexpr DTypeSet kWeightDTypes{DType::kF32,  DType::kBF16, DType::kF16,  DType::kF8E4M3,
                                 DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                                 DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
}  // namespace

WeightMatrix load_linear(const Checkpoint& ck, const std::string& name, int64_t n_out,
                         int64_t n_in) {
  const TensorInfo& t = ck.require(name, kWeightDTypes, {n_out, n_in});
  if (dtype_is_block(t.dtype)) return ggml_weight(t.dtype, n_out, n_in, t.data);  // GGUF blocks
  WeightMatrix w;
  w.dtype = t.dtype;
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = t.data;
  if (t.dtype == DType::kF8E4M3) {
    const std::string base = name.size() > 7 && name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
    const std::string sname = base + ".weight_scale_inv";
    const int64_t gr = (n_out + 127) / 128, gc = (n_in + 127) / 128;
    const TensorInfo& s = ck.require(sname, DTypeSet{DType::kF32}, {gr, gc});
    w.scale = reinterpret_cast<const float*>(s.data);
    w.scale_block_out = 128;
    w.scale_block_in = 128;
  }
  return w;
}

void convert_weight(WeightMatrix& w, const LoadOptions& opts, OwnedWeights& store,
                    ThreadPool* pool) {
  if (w.packed_format != kPackedNone) return;
  if (opts.weights_format == WeightsFormat::kQ8) {
    store.q8.push_back(quantize_q8(w, pool));
    w = store.q8.back().matrix();
  } else if (opts.prepack) {
    PackedWeight p = prepack_weight(w, pool);
    if (!p.repacked()) return;
    store.packed.push_back(std::move(p));
    w = store.packed.back().matrix();
  }
}

int64_t weight_bytes(const WeightMatrix& w) {
  if (w.packed_format == kPackedQ8) {  // (an AMX-packed BF16 matrix streams the same bytes)
    const int64_t nb = (w.n_in + kQ8Block - 1) / kQ8Block;
    return w.n_out * nb * (kQ8Block + int64_t(sizeof(float)));
  }
  if (dtype_is_block(w.dtype)) return w.n_out * dtype_row_bytes(w.dtype, w.n_in);  // (repacked: same)
  int64_t b = w.n_out * w.n_in * int64_t(dtype_size(w.dtype));
  if (w.dtype == DType::kF8E4M3 && w.scale)
    b += ((w.n_out + w.scale_block_out - 1) / w.scale_block_out) *
         ((w.n_in + w.scale_block_in - 1) / w.scale_block_in) * int64_t(sizeof(float));
  return b;
}

std::vector<float> load_vector(const Checkpoint& ck, const std::string& name, int64_t n) {
  return load_f32(ck, name, {n});
}

std::vector<float> load_norm(const Checkpoint& ck, const std::string& name, int64_t n,
                             NormStyle style) {
  std::vector<float> w = load_vector(ck, name, n);
  if (style == NormStyle::kZeroCentred)
    for (float& v : w) v = 1.0f + v;  // HF: n(x)·(1 + w_f32), one fp32 add (exact fold)
  return w;
}

std::vector<float> load_f32(const Checkpoint& ck, const std::string& name,
                            const std::vector<int64_t>& shape) {
  const TensorInfo& t = ck.require(name, kFloatWeights, shape);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, t.data + 4 * i, 4);
        out[i] = f;
        break;
      }
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = bf16_to_f32(h);
        break;
      }
      default: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = f16_to_f32(h);
        break;
      }
    }
  }
  return out;
}

void rows_to_f32(const WeightMatrix& w, const int32_t* rows, int64_t n_rows, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    DFL_ASSERT(rows[r] >= 0 && rows[r] < w.n_out);
    float* o = out + r * w.n_in;
    switch (w.dtype) {
      case DType::kF32:
        std::memcpy(o, static_cast<const float*>(w.data) + rows[r] * w.n_in, w.n_in * sizeof(float));
        break;
      case DType::kBF16: {
        const uint16_t* src = static_cast<const uint16_t*>(w.data) + rows[r] * w.n_in;
        for (int64_t i = 0; i < w.n_in; ++i) o[i] = bf16_to_f32(src[i]);
        break;
      }
      default:
        if (dtype_is_block(w.dtype) && w.packed_format == kPackedNone) {
          dequantize_rows(w, rows[r], 1, o);
        } else {
          for (int64_t i = 0; i < w.n_in; ++i) o[i] = ref::weight_at(w, rows[r], i);
        }
        break;
    }
  }
}

}  // namespace dfl
