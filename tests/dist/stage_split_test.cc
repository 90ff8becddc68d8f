// The pipeline stage plan, the wire format, and the stage forward WITHOUT MPI: stages of one
// model chained in one process (the relay's packing in between) give exactly the whole model's
// logits and taps.
#include <gtest/gtest.h>

#include <cstring>

#include "common/models.h"
#include "core/error.h"
#include "dist/stage_protocol.h"
#include "dist/stage_split.h"
#include "model/decoder.h"

namespace dfl {
namespace {

using dist::StageOp;
using dist::StepCommand;

WeightBytes bytes_of(std::vector<int64_t> layers, int64_t lm_head) {
  WeightBytes w;
  w.layer = std::move(layers);
  w.lm_head = lm_head;
  return w;
}

TEST(StageSplit, EvenLayersSplitEvenly) {
  const auto s = split_by_bytes(bytes_of({10, 10, 10, 10, 10, 10}, 0), 3);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].begin, 0);
  EXPECT_EQ(s[0].end, 2);
  EXPECT_EQ(s[1].end, 4);
  EXPECT_EQ(s[2].end, 6);
}

TEST(StageSplit, LmHeadWeighsOnTheLastStage) {
  // 4 layers of 10 and an lm_head of 20: total 60, halves at 30 → the last stage gets 1 layer + head.
  const auto s = split_by_bytes(bytes_of({10, 10, 10, 10}, 20), 2);
  EXPECT_EQ(s[0].end, 3);
  EXPECT_EQ(s[1].begin, 3);
  EXPECT_EQ(s[1].end, 4);
}

TEST(StageSplit, EveryStageKeepsALayer) {
  const auto s = split_by_bytes(bytes_of({1000, 1, 1}, 0), 3);
  EXPECT_EQ(s[0].end, 1);
  EXPECT_EQ(s[1].end, 2);
  EXPECT_EQ(s[2].end, 3);
  EXPECT_THROW(split_by_bytes(bytes_of({1, 1}, 0), 3), Error);
}

TEST(StageSplit, Counts) {
  const auto s = split_from_counts("3,1", 4, 2);
  EXPECT_EQ(s[0].end, 3);
  EXPECT_EQ(s[1].begin, 3);
  EXPECT_THROW(split_from_counts("2,1", 4, 2), Error);    // sums to 3
  EXPECT_THROW(split_from_counts("4", 4, 2), Error);      // one stage for two
  EXPECT_THROW(split_from_counts("2,x", 4, 2), Error);
  EXPECT_THROW(split_from_counts("4,0", 4, 2), Error);
  EXPECT_EQ(stages_str(s), "0-2,3-3");
}

TEST(StageSplit, TapOwnersAndBoundaryBytes) {
  const std::vector<StageRange> s = {{0, 2}, {2, 4}, {4, 6}};
  EXPECT_EQ(stage_of_aux(s, 0), 0);  // the embedding
  EXPECT_EQ(stage_of_aux(s, 2), 0);  // after layer 1
  EXPECT_EQ(stage_of_aux(s, 3), 1);  // after layer 2
  EXPECT_EQ(stage_of_aux(s, 6), 2);  // after layer 5
  const std::vector<int32_t> aux = {2, 4, 6};  // target_layer_ids 1, 3, 5 (+1 rule)
  EXPECT_EQ(boundary_bytes_per_row(s, 0, 8, aux, true), (1 + 1) * 8 * 4);
  EXPECT_EQ(boundary_bytes_per_row(s, 1, 8, aux, true), (1 + 2) * 8 * 4);
  EXPECT_EQ(boundary_bytes_per_row(s, 1, 8, aux, false), 8 * 4);
}

TEST(StageSplit, WeightBytesOfAFixture) {
  const ModelConfig cfg = load_model_config("tests/fixtures/default/target");
  Checkpoint ck(cfg.dir);
  const WeightBytes w = weight_bytes_of(ck, cfg);
  ASSERT_EQ(int32_t(w.layer.size()), cfg.n_layers);
  int64_t stored = 0;
  for (const std::string& n : ck.names()) stored += int64_t(ck.find(n)->nbytes);
  EXPECT_EQ(w.total(), stored);
  for (int64_t b : w.layer) EXPECT_EQ(b, w.layer[0]);
  EXPECT_GT(w.embed, 0);
}

TEST(StageProtocol, RoundTripAndRefusals) {
  StepCommand c;
  c.op = StageOp::kForward;
  c.trims = {{3, 0}, {1, 17}};
  c.segs = {{1, 2, 17, LogitsMode::kAll, true}, {0, 1, 5, LogitsMode::kLast, false}};
  c.aux = {1, 3};
  c.tokens = {7, 8, 9};
  c.group = 5;
  const std::vector<int32_t> m = dist::encode_command(c);
  const auto* bytes = reinterpret_cast<const uint8_t*>(m.data());
  const StepCommand d = dist::decode_command(bytes, m.size() * 4);
  EXPECT_EQ(d.trims.size(), 2u);
  EXPECT_EQ(d.trims[1].length, 17);
  ASSERT_EQ(d.segs.size(), 2u);
  EXPECT_EQ(d.segs[0].logits, LogitsMode::kAll);
  EXPECT_TRUE(d.segs[0].taps);
  EXPECT_EQ(d.tokens, c.tokens);
  EXPECT_EQ(d.aux, c.aux);
  EXPECT_EQ(d.group, 5);
  EXPECT_EQ(dist::batch_of(d).group, 5);
  StepCommand a;
  a.op = StageOp::kAttachKv;
  a.n_blocks = (int64_t(1) << 40) + 5;
  const auto ma = dist::encode_command(a);
  EXPECT_EQ(dist::decode_command(reinterpret_cast<const uint8_t*>(ma.data()), ma.size() * 4).n_blocks,
            a.n_blocks);
  // Truncated, trailing bytes, bad magic, token count not matching the rows.
  EXPECT_THROW(dist::decode_command(bytes, m.size() * 4 - 4), Error);
  std::vector<int32_t> longer = m;
  longer.push_back(0);
  EXPECT_THROW(dist::decode_command(reinterpret_cast<const uint8_t*>(longer.data()), longer.size() * 4), Error);
  std::vector<int32_t> bad = m;
  bad[0] ^= 1;
  EXPECT_THROW(dist::decode_command(reinterpret_cast<const uint8_t*>(bad.data()), bad.size() * 4), Error);
  bad = m;
  bad[bad.size() - 4] = 2;  // tokens count 3 → 2
  EXPECT_THROW(dist::decode_command(reinterpret_cast<const uint8_t*>(bad.data()), bad.size() * 4), Error);
  for (int32_t g : {-1, dist::kMaxGroups}) {  // the micro-batch group out of range
    bad = m;
    bad[2] = g;
    EXPECT_THROW(dist::decode_command(reinterpret_cast<const uint8_t*>(bad.data()), bad.size() * 4), Error);
  }
}

// Stages [0,1) [1,3) [3,4) of the default target, chained here through pack/unpack, against the
// whole model: logits and every tap bit-identical, over a batch of two segments (one with taps).
TEST(StageForward, ChainedStagesMatchTheWholeModel) {
  const std::string dir = "tests/fixtures/default/target";
  auto pool = test::make_pool(1);
  LoadOptions two;
  two.n_seqs = 2;
  auto whole = load_causal_lm(dir, two, *pool);
  const std::vector<StageRange> plan = {{0, 1}, {1, 3}, {3, 4}};
  std::vector<std::unique_ptr<CausalLM>> owned;
  std::vector<DecoderLM*> st;
  for (const StageRange& r : plan) {
    LoadOptions lo = two;
    lo.stage = r;
    owned.push_back(load_causal_lm(dir, lo, *pool));
    st.push_back(dynamic_cast<DecoderLM*>(owned.back().get()));
    ASSERT_NE(st.back(), nullptr);
  }
  EXPECT_TRUE(st[0]->embeds());
  EXPECT_FALSE(st[1]->embeds());
  EXPECT_TRUE(st[2]->has_head());
  EXPECT_EQ(st[1]->kv_layers().size(), 2u);
  const int32_t H = whole->config().hidden_size;
  const int64_t V = whole->config().vocab_size;
  const std::vector<int32_t> aux = {0, 2, 4};  // embedding, after layer 1, after layer 3
  const std::vector<int32_t> a = {5, 9, 11, 3, 2}, b = {7, 1, 4};
  for (int step = 0; step < 2; ++step) {
    ForwardBatch fb;
    fb.aux = &aux;
    const int32_t pa = step ? 5 : 0, pb = step ? 3 : 0;
    fb.segs = {{0, a.data(), int32_t(a.size()), pa, LogitsMode::kAll, true},
               {1, b.data(), int32_t(b.size()), pb, LogitsMode::kLast, false}};
    BatchOut ref;
    whole->forward(fb, ref);
    BatchOut out;
    std::vector<float> msg, prev_msg;
    const int64_t rows = int64_t(a.size() + b.size());
    for (size_t s = 0; s < st.size(); ++s) {
      st[s]->forward_stage(fb, s ? prev_msg.data() : nullptr, out);
      if (s) dist::unpack_taps(fb, prev_msg.data(), prev_msg.size(), rows, H, aux.size(),
                               dist::relayed_columns(plan, aux, int32_t(s) - 1), out.aux);
      if (s + 1 < st.size()) {
        dist::pack_activation(fb, st[s]->stage_output(), rows, H, out.aux, aux.size(),
                              dist::relayed_columns(plan, aux, int32_t(s)), msg);
        prev_msg.swap(msg);
      }
    }
    ASSERT_EQ(out.logits.size(), ref.logits.size());
    EXPECT_EQ(out.logits.size(), size_t(6 * V));
    EXPECT_EQ(std::memcmp(out.logits.data(), ref.logits.data(), ref.logits.size() * 4), 0) << "step " << step;
    ASSERT_EQ(out.aux.size(), ref.aux.size());
    EXPECT_EQ(std::memcmp(out.aux.data(), ref.aux.data(), ref.aux.size() * 4), 0) << "step " << step;
  }
  // A later stage refuses to embed; the first refuses input rows.
  ForwardBatch fb;
  fb.segs = {{0, a.data(), 1, 10, LogitsMode::kLast, false}};
  BatchOut o;
  EXPECT_THROW(st[1]->forward_stage(fb, nullptr, o), Error);
}

}  // namespace
}  // namespace dfl
