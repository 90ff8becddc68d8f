#include "engine/tap_dump.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/dtype.h"
#include "core/error.h"
#include "io/npy_writer.h"

namespace dfl {

std::vector<int32_t> tap_aux_indices(const std::vector<int32_t>& target_layer_ids, int32_t n_layers) {
  DFL_CHECK(!target_layer_ids.empty(), "no tap layers given");
  std::vector<int32_t> aux;
  for (int32_t t : target_layer_ids) {
    DFL_CHECK(t >= 0 && t < n_layers, "tap layer ", t, " is out of range: the target has ", n_layers,
              " layers (0..", n_layers - 1, ")");
    aux.push_back(t + 1);
  }
  return aux;
}

void capture_taps(CausalLM& target, int32_t seq, const std::vector<int32_t>& tokens,
                  const std::vector<int32_t>& aux, std::vector<float>& taps) {
  DFL_CHECK(!tokens.empty(), "capture_taps: empty sequence");
  DFL_CHECK(int64_t(tokens.size()) <= target.max_context(), "capture_taps: ", tokens.size(),
            " tokens exceed the context limit ", target.max_context());
  target.release(seq);
  ForwardArgs a;
  a.seq = seq;
  a.tokens = tokens.data();
  a.n = static_cast<int32_t>(tokens.size());
  a.pos0 = 0;
  a.logits = LogitsMode::kNone;
  a.aux = &aux;
  ForwardOut out;
  target.forward(a, out);
  target.release(seq);
  const size_t width = aux.size() * size_t(target.config().hidden_size);
  DFL_ASSERT(out.aux.size() == tokens.size() * width);
  taps = std::move(out.aux);
}

TapShardWriter::TapShardWriter(std::string dir, std::vector<int32_t> target_layer_ids,
                               std::vector<int32_t> aux, int32_t hidden, int64_t shard_tokens,
                               nlohmann::ordered_json meta)
    : dir_(std::move(dir)), layer_ids_(std::move(target_layer_ids)), aux_(std::move(aux)),
      hidden_(hidden), shard_tokens_(shard_tokens), meta_(std::move(meta)) {
  DFL_CHECK(shard_tokens_ >= 1, "shard size must be positive");
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  DFL_CHECK(!ec, "cannot create '", dir_, "': ", ec.message());
}

void TapShardWriter::add(const TapSequence& s, const std::vector<float>& taps) {
  const size_t width = aux_.size() * size_t(hidden_);
  DFL_CHECK(taps.size() == s.tokens.size() * width, "taps do not match the sequence length");
  DFL_CHECK(s.prompt_len >= 1 && size_t(s.prompt_len) <= s.tokens.size(), "bad prompt length");
  cur_seqs_.push_back({int64_t(tokens_.size()), int64_t(s.tokens.size()), s.prompt_len, s.sampled ? 1 : 0});
  tokens_.insert(tokens_.end(), s.tokens.begin(), s.tokens.end());
  const size_t old = taps_.size();
  taps_.resize(old + taps.size());
  for (size_t i = 0; i < taps.size(); ++i) taps_[old + i] = f32_to_bf16(taps[i]);
  total_tokens_ += int64_t(s.tokens.size());
  ++total_seqs_;
  if (int64_t(tokens_.size()) >= shard_tokens_) flush();
}

void TapShardWriter::flush() {
  if (tokens_.empty()) return;
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05zu", shards_.size());
  const std::string base = std::string(name);
  const int64_t T = int64_t(tokens_.size());
  const int64_t width = int64_t(aux_.size()) * hidden_;
  write_npy(dir_ + "/" + base + ".tokens.npy", "<i4", {T}, tokens_.data(), tokens_.size() * 4);
  write_npy(dir_ + "/" + base + ".taps.npy", "<u2", {T, width}, taps_.data(), taps_.size() * 2);
  shards_.push_back({{"tokens", base + ".tokens.npy"}, {"taps", base + ".taps.npy"},
                     {"num_tokens", T}, {"sequences", cur_seqs_}});
  tokens_.clear();
  taps_.clear();
  cur_seqs_ = nlohmann::ordered_json::array();
}

int64_t TapShardWriter::finish() {
  flush();
  nlohmann::ordered_json m;
  m["format"] = "dflash-taps/1";
  m["target_layer_ids"] = layer_ids_;
  m["aux_indices"] = aux_;
  m["hidden_size"] = hidden_;
  m["taps_dtype"] = "bfloat16 (stored as uint16 bit patterns)";
  m["sequence_fields"] = {"offset", "length", "prompt_len", "sampled"};
  m["num_sequences"] = total_seqs_;
  m["num_tokens"] = total_tokens_;
  for (auto& [k, v] : meta_.items()) m[k] = v;
  m["shards"] = shards_;
  std::ofstream f(dir_ + "/meta.json");
  DFL_CHECK(f, "cannot write '", dir_, "/meta.json'");
  f << m.dump(1) << "\n";
  DFL_CHECK(f.good(), "write error on '", dir_, "/meta.json'");
  return total_tokens_;
}

}  // namespace dfl
