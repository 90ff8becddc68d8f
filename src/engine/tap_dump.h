// Training data for a DFlash drafter: the target's tapped hidden states for whole sequences,
// written as shards the trainer (tools/train) reads without re-running the target.
//
// Taps follow the drafter's "+1" rule (model/model.h): DFlash target_layer_id t is aux index
// t + 1 = the residual stream after decoder layer t. capture_taps() runs a sequence through the
// target from position 0 (one forward, chunked by the model where it must be), so row p holds the
// features of token p — exactly what the DFlash proposer is handed for committed position p.
//
// Dump folder layout (format "dflash-taps/1"):
//   meta.json                      target, target_layer_ids, aux_indices, hidden_size, shards
//   shard-NNNNN.tokens.npy         int32  [T]            every sequence's ids, back to back
//   shard-NNNNN.taps.npy           uint16 [T, K·H]       bf16 bit patterns (round-to-nearest-even)
// and per shard in meta.json "sequences": [[offset, length, prompt_len, sampled], ...].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace dfl {

// Aux indices (in order) for DFlash target_layer_ids; a clear error for a layer the target lacks.
std::vector<int32_t> tap_aux_indices(const std::vector<int32_t>& target_layer_ids, int32_t n_layers);

// Runs `tokens` from position 0 through `target` on KV slot `seq` (released afterwards) and
// returns taps [n, aux.size() × hidden] (row p = features of tokens[p]).
void capture_taps(CausalLM& target, int32_t seq, const std::vector<int32_t>& tokens,
                  const std::vector<int32_t>& aux, std::vector<float>& taps);

struct TapSequence {
  std::vector<int32_t> tokens;  // prompt + response
  int32_t prompt_len = 0;
  bool sampled = false;         // response sampled (T > 0) rather than greedy
};

class TapShardWriter {
 public:
  // `meta` is copied into meta.json (target, generation settings, ...); shards close once they
  // hold at least shard_tokens tokens. Creates `dir` if needed.
  TapShardWriter(std::string dir, std::vector<int32_t> target_layer_ids, std::vector<int32_t> aux,
                 int32_t hidden, int64_t shard_tokens, nlohmann::ordered_json meta);
  // taps: [s.tokens.size(), aux.size() × hidden].
  void add(const TapSequence& s, const std::vector<float>& taps);
  // Writes the open shard and meta.json. Returns the total token count.
  int64_t finish();

 private:
  void flush();

  std::string dir_;
  std::vector<int32_t> layer_ids_, aux_;
  int32_t hidden_;
  int64_t shard_tokens_;
  nlohmann::ordered_json meta_;
  nlohmann::ordered_json shards_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json cur_seqs_ = nlohmann::ordered_json::array();
  std::vector<int32_t> tokens_;
  std::vector<uint16_t> taps_;
  int64_t total_tokens_ = 0, total_seqs_ = 0;
};

}  // namespace dfl
