// Fixtures: tests/fixtures/io/*.pt, written by tools/ref/make_pt_fixtures.py.
#include "io/torch_pickle.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/torch_tensor.h"
#include "st_builder.h"

namespace dfl {
namespace {

std::string fx(const std::string& name) { return "tests/fixtures/io/" + name; }

std::string error_of(const std::string& file) {
  try {
    read_torch_file(fx(file));
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << file << ": expected a dfl::Error";
  return "";
}

std::vector<float> values(const PtValue& v) {
  EXPECT_TRUE(v.is_tensor());
  return v.is_tensor() ? v.tensor->to_f32() : std::vector<float>{};
}

TEST(TorchPickle, BareF32) {
  const PtValue v = read_torch_file(fx("bare_f32.pt"));
  ASSERT_TRUE(v.is_tensor());
  EXPECT_EQ(v.tensor->dtype, DType::kF32);
  EXPECT_EQ(v.tensor->shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(values(v), (std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5}));
}

TEST(TorchPickle, BareBf16) {
  const PtValue v = read_torch_file(fx("bare_bf16.pt"));
  ASSERT_TRUE(v.is_tensor());
  EXPECT_EQ(v.tensor->dtype, DType::kBF16);
  EXPECT_EQ(v.tensor->data.size(), 12u);
  EXPECT_EQ(values(v), (std::vector<float>{1, -2, 0.5, 3.25, 0, -0.125}));
}

TEST(TorchPickle, StridedViewWithOffset) {
  const PtValue v = read_torch_file(fx("view.pt"));
  ASSERT_TRUE(v.is_tensor());
  EXPECT_EQ(v.tensor->shape, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(v.tensor->source_strides, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(v.tensor->source_offset, 6);
  const auto got = values(v);
  ASSERT_EQ(got.size(), 9u);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[i * 3 + j], 6.f * (1 + j) + 2.f * i) << i << "," << j;
}

TEST(TorchPickle, Float8ThroughRebuildV3) {
  const PtValue v = read_torch_file(fx("f8.pt"));
  ASSERT_TRUE(v.is_tensor());
  EXPECT_EQ(v.tensor->dtype, DType::kF8E4M3);
  EXPECT_EQ(values(v), (std::vector<float>{0.5, -1, 448, 0}));
}

TEST(TorchPickle, Parameter) {
  const PtValue v = read_torch_file(fx("param.pt"));
  ASSERT_TRUE(v.is_tensor());
  EXPECT_EQ(v.tensor->dtype, DType::kF16);
  EXPECT_EQ(values(v), (std::vector<float>{1, 1, 1}));
}

TEST(TorchPickle, StateDictWithMetadataBuild) {
  const PtValue v = read_torch_file(fx("state_dict.pt"));
  ASSERT_TRUE(v.is_dict());
  ASSERT_EQ(v.dict.size(), 2u);
  EXPECT_EQ(v.dict[0].key.s, "weight");  // insertion order kept
  EXPECT_EQ(values(*v.get("weight")), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values(*v.get("bias")), (std::vector<float>{10, 20}));
}

TEST(TorchPickle, NestedContainers) {
  const PtValue v = read_torch_file(fx("nested.pt"));
  ASSERT_TRUE(v.is_dict());
  const PtValue* a = v.get("a");
  ASSERT_TRUE(a && a->is_tensor());
  EXPECT_EQ(a->tensor->dtype, DType::kI64);
  EXPECT_EQ(values(*a), (std::vector<float>{7, 8, 9}));
  const PtValue* b = v.get("b");
  ASSERT_TRUE(b && b->is_dict());
  const PtValue* c = b->get("c");
  ASSERT_TRUE(c && c->kind == PtValue::Kind::kList);
  ASSERT_EQ(c->items.size(), 6u);
  EXPECT_EQ(c->items[0].i, 1);
  EXPECT_EQ(c->items[1].f, 2.5);
  EXPECT_EQ(c->items[2].s, "x");
  EXPECT_TRUE(c->items[3].b);
  EXPECT_TRUE(c->items[4].is_none());
  EXPECT_EQ(c->items[5].i, -300000000000);  // LONG1
  const PtValue* d = b->get("d");
  ASSERT_TRUE(d && d->kind == PtValue::Kind::kTuple);
  EXPECT_EQ(d->items[0].i, 3);
  EXPECT_EQ(values(d->items[1]), (std::vector<float>{8, 9}));  // view into a's storage
  const PtValue* e = v.get("e");
  ASSERT_TRUE(e && e->is_tensor());
  EXPECT_EQ(e->tensor->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(e->tensor->data.empty());
  EXPECT_EQ(v.get("zzz"), nullptr);
}

TEST(TorchPickle, RefusesHostileGlobals) {
  std::string m = error_of("evil_os_system.pt");
  EXPECT_NE(m.find("refused: pickle global 'os.system' is not allowed"), std::string::npos) << m;
  m = error_of("evil_eval.pt");
  EXPECT_NE(m.find("refused: pickle global 'builtins.eval' is not allowed"), std::string::npos)
      << m;
  m = error_of("evil_stack_global.pt");
  EXPECT_NE(m.find("refused: pickle global 'subprocess.check_call'"), std::string::npos) << m;
  m = error_of("evil_inst.pt");
  EXPECT_NE(m.find("refused: pickle opcode 0x69"), std::string::npos) << m;
  m = error_of("evil_opcode.pt");
  EXPECT_NE(m.find("refused: pickle opcode 0xff"), std::string::npos) << m;
}

TEST(TorchPickle, RejectsBrokenStreams) {
  std::string m = error_of("evil_truncated.pt");
  EXPECT_NE(m.find("evil_truncated.pt"), std::string::npos) << m;
  m = error_of("evil_memo.pt");
  EXPECT_NE(m.find("memo index 4294967295 was never stored"), std::string::npos) << m;
  m = error_of("evil_underflow.pt");
  EXPECT_NE(m.find("stack underflow"), std::string::npos) << m;
  m = error_of("evil_cycle.pt");
  EXPECT_NE(m.find("cyclic"), std::string::npos) << m;
}

TEST(TorchPickle, RejectsBadStoragesAndArchives) {
  std::string m = error_of("evil_storage_small.pt");
  EXPECT_NE(m.find("declares 8 elements of F32 but holds 8 bytes"), std::string::npos) << m;
  m = error_of("evil_view_past_storage.pt");
  EXPECT_NE(m.find("reaches past its storage of 24 elements"), std::string::npos) << m;
  m = error_of("evil_big_endian.pt");
  EXPECT_NE(m.find("only little-endian"), std::string::npos) << m;
  m = error_of("not_a_zip.pt");
  EXPECT_NE(m.find("not a valid zip archive"), std::string::npos) << m;
  m = error_of("does_not_exist.pt");
  EXPECT_NE(m.find("does_not_exist.pt"), std::string::npos) << m;
}

TEST(TorchPickle, LimitsAreEnforced) {
  PtReadLimits small;
  small.max_total_tensor_bytes = 16;  // bare_f32 holds 32 bytes
  EXPECT_THROW(read_torch_file(fx("bare_f32.pt"), small), Error);
  PtReadLimits shallow;
  shallow.max_depth = 1;
  EXPECT_THROW(read_torch_file(fx("nested.pt"), shallow), Error);
  EXPECT_NO_THROW(read_torch_file(fx("bare_f32.pt"), shallow));
}

// The VM alone, on hand-written streams.
std::string no_storage(void*, const std::string& key, uint64_t) {
  throw Error("no storage " + key);
}
PtValue unpickle(const std::string& pkl) {
  return unpickle_torch(pkl, "mem", &no_storage, nullptr);
}

TEST(TorchPickle, VmPrimitives) {
  // PROTO 2, MARK, BININT -5, BININT2 513, LONG1 0 bytes, BINFLOAT 1.5, TUPLE, STOP
  const std::string pkl(
      "\x80\x02(J\xfb\xff\xff\xffM\x01\x02\x8a\x00G\x3f\xf8\x00\x00\x00\x00\x00\x00t.", 28);
  const PtValue v = unpickle(pkl);
  ASSERT_EQ(v.kind, PtValue::Kind::kTuple);
  ASSERT_EQ(v.items.size(), 4u);
  EXPECT_EQ(v.items[0].i, -5);
  EXPECT_EQ(v.items[1].i, 513);
  EXPECT_EQ(v.items[2].i, 0);
  EXPECT_EQ(v.items[3].f, 1.5);
  // A repeated key stays a separate entry; get() returns the last, as Python would keep it.
  const PtValue d = unpickle(std::string("}(\x8c\x01kK\x01\x8c\x01kK\x02u.", 15));
  ASSERT_EQ(d.dict.size(), 2u);
  EXPECT_EQ(d.get("k")->i, 2);
  EXPECT_THROW(unpickle("}N\x29s."), Error);  // a None key is refused
  EXPECT_THROW(unpickle(""), Error);
  EXPECT_THROW(unpickle("\x80\x09."), Error);                      // protocol 9
  EXPECT_THROW(unpickle("K\x01(0."), Error);                       // POP across a MARK
  EXPECT_THROW(unpickle("X\xff\xff\xff\x7f"), Error);              // string longer than the stream
  EXPECT_THROW(unpickle(std::string("\x8c\x01\xff.", 4)), Error);  // invalid UTF-8
  EXPECT_THROW(unpickle("}Na."), Error);                           // APPEND onto a dict
  EXPECT_THROW(unpickle("N}b."), Error);                           // BUILD onto None
  EXPECT_TRUE(unpickle("}Nb.").is_dict());  // BUILD of None state onto a dict
  EXPECT_THROW(unpickle("K\x01"), Error);   // no STOP
}

TEST(CopyStrided, BoundsAndOverflow) {
  std::string storage(4 * 6, '\0');
  for (int k = 0; k < 6; ++k) {
    const float f = static_cast<float>(k);
    std::memcpy(storage.data() + 4 * k, &f, 4);
  }
  PtTensor t;
  std::string why;
  ASSERT_TRUE(copy_strided(storage, DType::kF32, 1, {2, 2}, {1, 2}, 1 << 20, &t, &why)) << why;
  EXPECT_EQ(t.to_f32(), (std::vector<float>{1, 3, 2, 4}));
  EXPECT_FALSE(copy_strided(storage, DType::kF32, 3, {2, 2}, {1, 2}, 1 << 20, &t, &why));
  EXPECT_FALSE(copy_strided(storage, DType::kF32, -1, {1}, {1}, 1 << 20, &t, &why));
  EXPECT_FALSE(copy_strided(storage, DType::kF32, 0, {1}, {-1}, 1 << 20, &t, &why));
  EXPECT_FALSE(
      copy_strided(storage, DType::kF32, 0, {int64_t{1} << 62, 4}, {0, 0}, 1 << 20, &t, &why));
  EXPECT_FALSE(copy_strided(storage, DType::kF32, 0, {3}, {int64_t{1} << 62}, 1 << 20, &t, &why));
  // Stride-0 broadcast is legal, bounded by max_bytes.
  ASSERT_TRUE(copy_strided(storage, DType::kF32, 5, {3}, {0}, 12, &t, &why)) << why;
  EXPECT_EQ(t.to_f32(), (std::vector<float>{5, 5, 5}));
  EXPECT_FALSE(copy_strided(storage, DType::kF32, 5, {4}, {0}, 12, &t, &why));
  // Empty view at any offset within int range.
  ASSERT_TRUE(copy_strided(storage, DType::kF32, 100, {0, 3}, {3, 1}, 0, &t, &why)) << why;
}

TEST(MaskEmbedding, DictWithId) {
  const MaskEmbedding m = read_mask_embedding(fx("mask_dict.pt"), 16, 151669);
  ASSERT_EQ(m.values.size(), 16u);
  EXPECT_FLOAT_EQ(m.values.front(), -1.f);
  EXPECT_FLOAT_EQ(m.values.back(), 1.f);
  EXPECT_EQ(m.mask_token_id, 151669);
  EXPECT_EQ(read_mask_embedding(fx("mask_dict.pt"), 16, std::nullopt).mask_token_id, 151669);
}

TEST(MaskEmbedding, BareAndReshaped) {
  const MaskEmbedding bare = read_mask_embedding(fx("bare_bf16.pt"), 6, 5);
  EXPECT_EQ(bare.values[3], 3.25f);
  EXPECT_FALSE(bare.mask_token_id.has_value());
  const MaskEmbedding two_d = read_mask_embedding(fx("mask_dict_2d.pt"), 16, 151669);
  EXPECT_EQ(two_d.values.size(), 16u);
  EXPECT_FALSE(two_d.mask_token_id.has_value());
}

TEST(MaskEmbedding, Errors) {
  auto err = [](const std::string& f, int64_t hidden, std::optional<int64_t> id) {
    try {
      read_mask_embedding(fx(f), hidden, id);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = err("mask_dict.pt", 16, 7);
  EXPECT_NE(m.find("is for mask_token_id 151669, but the drafter config says 7"), std::string::npos)
      << m;
  m = err("mask_dict.pt", 32, std::nullopt);
  EXPECT_NE(m.find("has 16 elements (shape [16]), but the drafter's hidden_size is 32"),
            std::string::npos)
      << m;
  m = err("state_dict.pt", 6, std::nullopt);
  EXPECT_NE(m.find("without an 'embedding' entry (keys: weight, bias)"), std::string::npos) << m;
  m = err("nested.pt", 3, std::nullopt);
  EXPECT_NE(m.find("without an 'embedding'"), std::string::npos) << m;
  m = err("f8.pt", 4, std::nullopt);
  EXPECT_NE(m.find("expected a float tensor"), std::string::npos) << m;
  m = err("evil_os_system.pt", 4, std::nullopt);
  EXPECT_NE(m.find("refused"), std::string::npos) << m;
}

}  // namespace
}  // namespace dfl
