// Factory functions of the model families (one .cc file per family under model/arch/).
#pragma once

#include <memory>

#include "model/model.h"

namespace dfl {

std::unique_ptr<CausalLM> make_qwen3(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool);
std::unique_ptr<CausalLM> make_mimo_v2(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool);

}  // namespace dfl
