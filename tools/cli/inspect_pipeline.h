// `dflash inspect DIR --pipeline-parallel N [--pp-layers a,b,..] [--draft DIR]`: the stage plan
// (the split `mpirun -np N dflash run --pipeline-parallel N` would use), weight and KV bytes per
// rank, and the bytes that cross each stage boundary per row and per step (docs/DISTRIBUTED.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace dfl::cli {

struct PipelineInspect {
  int32_t n_stages = 2;
  std::string layer_counts;              // --pp-layers, empty = by weight bytes
  std::optional<ModelConfig> draft;      // --draft: its taps ride the relay
  int64_t context = 4096;
  int32_t slack = 16;
};

// The plan as JSON; weights are the checkpoint's when the folder has them, else estimated from
// the config ("weights_source" says which).
nlohmann::ordered_json pipeline_plan(const ModelConfig& c, const PipelineInspect& p);
void print_pipeline_plan(const nlohmann::ordered_json& plan);

}  // namespace dfl::cli
