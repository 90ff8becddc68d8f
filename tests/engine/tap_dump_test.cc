// engine/tap_dump.h: the taps `dflash dump-taps` writes are the taps the DFlash proposer is handed
// for the same tokens (the engine's own speculative run on the tiny fixture pair, recorded through
// EngineOptions::wrap_proposer), and the .npy shards + meta.json have the documented layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "common/models.h"
#include "core/dtype.h"
#include "engine/engine.h"
#include "engine/tap_dump.h"

namespace dfl {
namespace {

namespace fs = std::filesystem;

// Passes everything to the real proposer and keeps every context row it is handed, by position.
class RecordingProposer final : public Proposer {
 public:
  explicit RecordingProposer(Proposer* real) : real_(real) {}
  const std::vector<int32_t>& target_aux() const override { return real_->target_aux(); }
  int32_t max_draft() const override { return real_->max_draft(); }
  void reset(int32_t seq) override { real_->reset(seq); }
  void add_context(int32_t seq, const float* taps, int32_t n, int32_t pos0) override {
    record(taps, n, pos0);
    real_->add_context(seq, taps, n, pos0);
  }
  void propose(int32_t seq, int32_t anchor, int32_t anchor_pos, int32_t n_draft,
               const SamplingParams& params, Rng& rng, Draft& out) override {
    real_->propose(seq, anchor, anchor_pos, n_draft, params, rng, out);
  }
  KvPool* kv_pool() override { return real_->kv_pool(); }
  void propose_batch(const std::vector<ProposeJob>& jobs) override {
    for (const ProposeJob& j : jobs) record(j.taps, j.n_ctx, j.ctx_pos0);
    real_->propose_batch(jobs);
  }
  void set_width(size_t w) { width_ = w; }
  std::map<int32_t, std::vector<float>> rows;

 private:
  void record(const float* taps, int32_t n, int32_t pos0) {
    for (int32_t i = 0; i < n; ++i) rows[pos0 + i].assign(taps + size_t(i) * width_, taps + size_t(i + 1) * width_);
  }
  Proposer* real_;
  size_t width_ = 0;
};

TEST(TapDump, CapturedTapsEqualWhatTheDFlashProposerSees) {
  const std::string target_dir = test::fixture("default/target"), draft_dir = test::fixture("default/draft");
  std::unique_ptr<RecordingProposer> rec;
  EngineOptions eo;
  eo.model_dir = target_dir;
  eo.draft_dir = draft_dir;
  eo.threads = 1;
  eo.max_context = 256;
  eo.max_seqs = 1;
  eo.calibrate = false;
  eo.wrap_proposer = [&](Proposer* real) -> Proposer* {
    rec = std::make_unique<RecordingProposer>(real);
    return rec.get();
  };
  std::vector<int32_t> tokens;
  {
    Engine engine(eo);
    Request r;
    r.prompt.text = "The quick brown fox jumps over the lazy dog";
    r.max_tokens = 40;
    r.ignore_eos = true;
    tokens = engine.render_prompt(r.prompt);
    r.on_update = [&](const RequestUpdate& u) { tokens.insert(tokens.end(), u.new_tokens.begin(), u.new_tokens.end()); };
    ASSERT_TRUE(rec);
    // The drafter taps target layers [1, 2] of the fixture: aux 2 and 3, hidden 128.
    ASSERT_EQ(rec->target_aux(), (std::vector<int32_t>{2, 3}));
    rec->set_width(2 * 128);
    engine.submit(std::move(r));
    engine.run_until_idle();
  }
  auto pool = test::make_pool(1);
  LoadOptions lo;
  lo.max_context = 256;
  auto target = load_causal_lm(target_dir, lo, *pool);
  const std::vector<int32_t> aux = tap_aux_indices({1, 2}, target->config().n_layers);
  EXPECT_EQ(aux, (std::vector<int32_t>{2, 3}));
  std::vector<float> taps;
  capture_taps(*target, 0, tokens, aux, taps);
  ASSERT_EQ(taps.size(), tokens.size() * 2 * 128);
  ASSERT_GE(rec->rows.size(), tokens.size() - 2);  // every committed position but the last anchor
  double worst = 0;
  for (const auto& [pos, row] : rec->rows) {
    ASSERT_LT(size_t(pos), tokens.size());
    for (size_t k = 0; k < row.size(); ++k)
      worst = std::max(worst, double(std::fabs(row[k] - taps[size_t(pos) * row.size() + k])) /
                                  (1.0 + std::fabs(row[k])));
  }
  // Same kernels, different row grouping (prefill chunks and verify blocks vs one pass).
  EXPECT_LT(worst, 1e-4);
  EXPECT_THROW(tap_aux_indices({4}, target->config().n_layers), Error);
}

// The .npy header of `path`: {descr, shape}, and the file's data bytes.
std::pair<std::string, std::string> npy_header(const std::string& path, std::string* data) {
  std::ifstream f(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all.substr(0, 6), "\x93NUMPY");
  const size_t hl = uint8_t(all[8]) | (size_t(uint8_t(all[9])) << 8);
  EXPECT_EQ((10 + hl) % 64, 0u);
  const std::string h = all.substr(10, hl);
  *data = all.substr(10 + hl);
  const size_t d = h.find("'descr': '") + 10, s = h.find("'shape': (") + 10;
  return {h.substr(d, h.find('\'', d) - d), h.substr(s, h.find(')', s) - s)};
}

TEST(TapDump, ShardsAndMetaHaveTheDocumentedLayout) {
  const fs::path dir = fs::temp_directory_path() / ("dfl_tapdump_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TapShardWriter w(dir.string(), {1, 2}, {2, 3}, 4, /*shard_tokens=*/5, {{"target", "x"}});
  TapSequence a{{2, 10, 11, 12}, 2, false}, b{{2, 20, 21}, 1, true}, c{{2, 30, 31, 32, 33, 34}, 3, false};
  auto taps_of = [](const TapSequence& s) {
    std::vector<float> t(s.tokens.size() * 8);
    for (size_t i = 0; i < t.size(); ++i) t[i] = float(s.tokens[i / 8]) + 0.25f * float(i % 8);
    return t;
  };
  w.add(a, taps_of(a));
  w.add(b, taps_of(b));  // 7 tokens >= 5: shard 0 closes with a and b
  w.add(c, taps_of(c));
  EXPECT_EQ(w.finish(), 13);
  const auto meta = test::read_json((dir / "meta.json").string());
  EXPECT_EQ(meta["format"], "dflash-taps/1");
  EXPECT_EQ(meta["aux_indices"], nlohmann::json({2, 3}));
  EXPECT_EQ(meta["target"], "x");
  ASSERT_EQ(meta["shards"].size(), 2u);
  EXPECT_EQ(meta["shards"][0]["sequences"], nlohmann::json({{0, 4, 2, 0}, {4, 3, 1, 1}}));
  EXPECT_EQ(meta["shards"][1]["sequences"], nlohmann::json({{0, 6, 3, 0}}));
  std::string data;
  auto [d0, s0] = npy_header((dir / "shard-00000.tokens.npy").string(), &data);
  EXPECT_EQ(d0, "<i4");
  EXPECT_EQ(s0, "7,");
  ASSERT_EQ(data.size(), 28u);
  int32_t t5;
  std::memcpy(&t5, data.data() + 5 * 4, 4);
  EXPECT_EQ(t5, 20);
  auto [d1, s1] = npy_header((dir / "shard-00001.taps.npy").string(), &data);
  EXPECT_EQ(d1, "<u2");
  EXPECT_EQ(s1, "6, 8");
  ASSERT_EQ(data.size(), 6u * 8 * 2);
  const std::vector<float> ct = taps_of(c);
  for (size_t i = 0; i < ct.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, data.data() + 2 * i, 2);
    EXPECT_EQ(bf16_to_f32(h), ct[i]) << i;  // these values are exact in bf16
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dfl
