// Glue between io/gguf.h and kernels/ops.h: WeightMatrix views of GGUF tensors, in place in the
// mapping (no copy). A 2-D GGUF tensor with ne = [n_in, n_out] is a torch [n_out, n_in] weight;
// higher ranks are flattened to rows = ne[1]·ne[2]·ne[3]. Keep the GgufFile alive while views
// are used. For the fastest kernels pass the view through prepack_weight() once (Q4_K, Q6_K,
// Q8_0, Q5_0, Q4_0 get a 16-output layout in int8 mode; see ops.h GgmlActivations).
#pragma once

#include <string_view>

#include "core/error.h"
#include "io/gguf.h"
#include "kernels/ops.h"

namespace dfl {

inline WeightMatrix gguf_weight(const GgufFile& f, const GgufTensor& t) {
  const DType dt = t.dtype(f.path());  // throws for ggml types we do not support (e.g. IQ2_XS)
  DFL_CHECK(dtype_is_block(dt) || dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16,
            "gguf '", f.path(), "': tensor '", t.name, "' has type ", t.type->name,
            ", not a weight type");
  return ggml_weight(dt, t.rows(), t.cols(), t.data);
}

inline WeightMatrix gguf_weight(const GgufFile& f, std::string_view name) {
  return gguf_weight(f, f.tensor(name));
}

}  // namespace dfl
