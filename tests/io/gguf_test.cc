// GGUF reader: well-formed files of every metadata type, then truncated / corrupt variants.
#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "gguf_builder.h"
#include "st_builder.h"

namespace dfl {
namespace {

using test::GgufBuilder;

GgufHeader parse(const std::string& b) {
  return parse_gguf(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "t.gguf");
}

std::string expect_error(const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

GgufBuilder sample(uint32_t version = 3) {
  GgufBuilder b(version);
  b.kv_str("general.architecture", "gemma3");
  b.kv_u32("gemma3.block_count", 18);
  b.kv_i32("neg", -5);
  b.kv_f32("gemma3.rope.freq_base", 1e6f);
  b.kv_f64("f64", 0.25);
  b.kv_bool("flag", true);
  b.kv_u64("big", 1ull << 40);
  b.kv_raw("u8", 0, std::string(1, '\x07'));
  b.kv_raw("i8", 1, std::string(1, '\xfe'));
  b.kv_raw("u16", 2, GgufBuilder::pod(uint16_t(65535)));
  b.kv_raw("i16", 3, GgufBuilder::pod(int16_t(-300)));
  b.kv_raw("i64", 11, GgufBuilder::pod(int64_t(-7)));
  b.kv_str_array("tokens", {"<pad>", "\xe2\x96\x81hi", ""});
  b.kv_array<float>("scores", 6, {0.f, -1.5f, 2.f});
  b.kv_array<int32_t>("types", 5, {3, 1, 6});
  // Array of arrays: [[1, 2], ["a"]].
  std::string nested = GgufBuilder::pod(uint32_t(9)) + GgufBuilder::pod(uint64_t(2));
  nested += GgufBuilder::pod(uint32_t(4)) + GgufBuilder::pod(uint64_t(2)) +
            GgufBuilder::pod(uint32_t(1)) + GgufBuilder::pod(uint32_t(2));
  nested += GgufBuilder::pod(uint32_t(8)) + GgufBuilder::pod(uint64_t(1)) + GgufBuilder::str("a");
  b.kv_raw("nested", 9, nested);
  b.tensor("w", {4, 3}, 0, f32_bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  b.tensor("q", {32, 2}, 8, std::string(68, '\x01'));  // Q8_0: 2 rows × 1 block × 34 bytes
  b.tensor("empty", {0, 5}, 12, "");
  return b;
}

TEST(Gguf, ParsesEveryMetadataTypeV3AndV2) {
  for (uint32_t version : {2u, 3u}) {
    const std::string bytes = sample(version).build();
    const GgufHeader h = parse(bytes);
    EXPECT_EQ(h.version, version);
    EXPECT_EQ(h.alignment, 32u);
    EXPECT_EQ(h.data_offset % 32, 0u);
    ASSERT_EQ(h.kv.size(), 16u);
    EXPECT_EQ(h.kv_order.front(), "general.architecture");
    EXPECT_EQ(h.kv.at("general.architecture").str, "gemma3");
    EXPECT_EQ(h.kv.at("gemma3.block_count").u, 18u);
    EXPECT_EQ(h.kv.at("neg").i, -5);
    EXPECT_EQ(h.kv.at("gemma3.rope.freq_base").f, 1e6);
    EXPECT_EQ(h.kv.at("f64").f, 0.25);
    EXPECT_EQ(h.kv.at("flag").u, 1u);
    EXPECT_EQ(h.kv.at("big").u, 1ull << 40);
    EXPECT_EQ(h.kv.at("u8").u, 7u);
    EXPECT_EQ(h.kv.at("i8").i, -2);
    EXPECT_EQ(h.kv.at("u16").u, 65535u);
    EXPECT_EQ(h.kv.at("i16").i, -300);
    EXPECT_EQ(h.kv.at("i64").i, -7);
    const GgufValue& tok = h.kv.at("tokens");
    ASSERT_EQ(tok.strs.size(), 3u);
    EXPECT_EQ(tok.strs[1], "\xe2\x96\x81hi");
    EXPECT_EQ(tok.strs[2], "");
    EXPECT_EQ(h.kv.at("scores").array_f64(1), -1.5);
    EXPECT_EQ(h.kv.at("types").array_i64(2), 6);
    const GgufValue& n = h.kv.at("nested");
    ASSERT_EQ(n.items.size(), 2u);
    EXPECT_EQ(n.items[0].array_i64(1), 2);
    EXPECT_EQ(n.items[1].strs[0], "a");

    ASSERT_EQ(h.tensors.size(), 3u);
    const GgufTensor& w = h.tensors[0];
    EXPECT_EQ(w.name, "w");
    EXPECT_EQ(w.cols(), 4);
    EXPECT_EQ(w.rows(), 3);
    EXPECT_EQ(w.shape(), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(w.nbytes, 48u);
    EXPECT_EQ(w.dtype("t"), DType::kF32);
    float v;
    std::memcpy(&v, w.data + 4 * 5, 4);
    EXPECT_EQ(v, 5.0f);
    EXPECT_EQ(h.tensors[1].nbytes, 68u);
    EXPECT_EQ(h.tensors[1].dtype("t"), DType::kQ8_0);
    EXPECT_EQ(h.tensors[2].nbytes, 0u);
    EXPECT_EQ(static_cast<size_t>(h.tensors[1].data - reinterpret_cast<const uint8_t*>(bytes.data())) % 32, 0u);
  }
}

TEST(Gguf, FileAccessorsDistinguishMissingAndWrongType) {
  test::TempDir dir("gguf");
  const std::string path = dir.file("a.gguf");
  test::write_file(path, sample().build());
  GgufFile f(path);
  EXPECT_EQ(f.get_string("general.architecture"), "gemma3");
  EXPECT_EQ(f.get_u32("gemma3.block_count"), 18u);
  EXPECT_EQ(f.get_u32("u16"), 65535u);
  EXPECT_EQ(f.get_i64("neg"), -5);
  EXPECT_EQ(f.get_f32("gemma3.rope.freq_base"), 1e6f);
  EXPECT_EQ(f.get_f32("f64"), 0.25f);
  EXPECT_TRUE(f.get_bool("flag"));
  EXPECT_EQ(f.get_u32_or("absent", 9), 9u);
  EXPECT_EQ(f.get_string_or("absent", "x"), "x");
  EXPECT_EQ(f.get_string_array("tokens").size(), 3u);
  EXPECT_EQ(f.get_f32_array("scores")[2], 2.0f);
  EXPECT_EQ(f.get_i32_array("types")[0], 3);
  EXPECT_EQ(f.tensor("w").rows(), 3);
  auto msg = [&](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([&] { f.get_u32("nope"); }).find("missing key 'nope'"), std::string::npos);
  EXPECT_NE(msg([&] { f.get_u32("general.architecture"); }).find("has type string, expected an integer"),
            std::string::npos);
  EXPECT_NE(msg([&] { f.get_u32("neg"); }).find("does not fit u32"), std::string::npos);
  EXPECT_NE(msg([&] { f.get_string("flag"); }).find("has type bool, expected string"), std::string::npos);
  EXPECT_NE(msg([&] { f.get_string_array("scores"); }).find("array of f32, expected array of string"),
            std::string::npos);
  EXPECT_NE(msg([&] { f.get_i32_array("scores"); }).find("expected array of integers"), std::string::npos);
  EXPECT_NE(msg([&] { f.tensor("zz"); }).find("tensor 'zz' not found"), std::string::npos);
  EXPECT_NE(msg([&] { f.get_u32("nope"); }).find(path), std::string::npos);
}

TEST(Gguf, CustomAlignment) {
  GgufBuilder b(3, 64);
  b.kv_u32("general.alignment", 64);
  b.tensor("a", {3}, 0, f32_bytes({1, 2, 3}));
  b.tensor("b", {2}, 0, f32_bytes({4, 5}));
  const std::string bytes = b.build();
  const GgufHeader h = parse(bytes);
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  EXPECT_EQ(h.tensors[1].offset, 64u);
  GgufBuilder bad(3, 32);
  bad.kv_u32("general.alignment", 48);
  EXPECT_NE(expect_error(bad.build()).find("not a power of two"), std::string::npos);
  GgufBuilder bad2(3, 32);
  bad2.kv_str("general.alignment", "32");
  EXPECT_NE(expect_error(bad2.build()).find("general.alignment has type string"), std::string::npos);
}

TEST(Gguf, EveryTruncationFailsCleanly) {
  const std::string full = sample().build();
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string cut = full.substr(0, n);
    try {
      parse(cut);
      // Only a cut inside the zero-size tail could parse; the last tensor holds bytes, so no.
      ADD_FAILURE() << "truncated to " << n << " bytes parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gguf 't.gguf'"), std::string::npos) << e.what();
    }
  }
}

TEST(Gguf, CorruptHeaders) {
  auto with = [](std::string b, size_t at, const std::string& patch) {
    b.replace(at, patch.size(), patch);
    return b;
  };
  const std::string ok = sample().build();
  EXPECT_NE(expect_error("GGML").find("magic"), std::string::npos);
  EXPECT_NE(expect_error(with(ok, 4, GgufBuilder::pod(uint32_t(1)))).find("version 1"), std::string::npos);
  EXPECT_NE(expect_error(with(ok, 4, GgufBuilder::pod(uint32_t(0x03000000)))).find("big-endian"),
            std::string::npos);
  EXPECT_NE(expect_error(with(ok, 8, GgufBuilder::pod(uint64_t(1) << 60))).find("tensor count"),
            std::string::npos);
  EXPECT_NE(expect_error(with(ok, 16, GgufBuilder::pod(~uint64_t(0)))).find("metadata count"),
            std::string::npos);
  // First key length huge.
  EXPECT_NE(expect_error(with(ok, 24, GgufBuilder::pod(uint64_t(1) << 62))).find("truncated"),
            std::string::npos);
  // First value type (after "general.architecture", 20 bytes) unknown.
  EXPECT_NE(expect_error(with(ok, 24 + 8 + 20, GgufBuilder::pod(uint32_t(13)))).find("unknown value type 13"),
            std::string::npos);

  auto one = [](auto&& fill) {
    GgufBuilder b;
    fill(b);
    return expect_error(b.build());
  };
  EXPECT_NE(one([](GgufBuilder& b) { b.kv_u32("k", 1); b.kv_u32("k", 2); }).find("'k' appears twice"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) { b.kv_raw("k", 7, std::string(1, '\x02')); }).find("bool value 2"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) {
              b.kv_raw("k", 9, GgufBuilder::pod(uint32_t(6)) + GgufBuilder::pod(uint64_t(1) << 62));
            }).find("array of 4611686018427387904 f32 runs past"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) {
              b.kv_raw("k", 9, GgufBuilder::pod(uint32_t(8)) + GgufBuilder::pod(uint64_t(1) << 40));
            }).find("cannot fit"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) {
              b.kv_raw("k", 9, GgufBuilder::pod(uint32_t(77)) + GgufBuilder::pod(uint64_t(0)));
            }).find("unknown array element type 77"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) {  // arrays nested 9 deep
              std::string v;
              for (int i = 0; i < 9; ++i) v += GgufBuilder::pod(uint32_t(9)) + GgufBuilder::pod(uint64_t(1));
              v += GgufBuilder::pod(uint32_t(4)) + GgufBuilder::pod(uint64_t(0));
              b.kv_raw("deep", 9, v);
            }).find("nested deeper"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) { b.kv_str("\xff\xfe", "x"); }).find("not valid UTF-8"), std::string::npos);
  // Tensor problems.
  EXPECT_NE(one([](GgufBuilder& b) { b.tensor("t", {4}, 0, f32_bytes({1, 2, 3, 4})); b.tensor("t", {1}, 0, f32_bytes({1})); })
                .find("tensor 't': appears twice"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) { b.tensor("t", {1, 1, 1, 1, 1}, 0, f32_bytes({1})); }).find("5 dimensions"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) { b.tensor("t", {4}, 99, ""); }).find("unknown ggml type 99"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) { b.tensor("t", {33}, 8, std::string(34, 0)); }).find("not a multiple of the Q8_0 block size 32"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) { b.tensor("t", {1ull << 32, 1ull << 32}, 0, ""); }).find("larger than the file"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) { b.tensor("t", {1ull << 62, 1ull << 62, 16}, 0, ""); }).find("larger than the file"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) { b.tensor("t", {4}, 0, f32_bytes({1, 2, 3, 4}), 8); }).find("not a multiple of the alignment"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) { b.tensor("t", {16}, 0, f32_bytes({1, 2, 3, 4})); }).find("runs past the end"),
            std::string::npos);
  EXPECT_NE(one([](GgufBuilder& b) {
              b.tensor("a", {16}, 0, f32_bytes(std::vector<float>(16, 1.f)));
              b.tensor("b", {8}, 0, "", 32);
            }).find("overlap"),
            std::string::npos);
}

TEST(Gguf, UnsupportedTypeParsesButHasNoDType) {
  GgufBuilder b;
  b.tensor("t", {256}, 10, std::string(84, 0));  // Q2_K
  const std::string bytes = b.build();
  const GgufHeader h = parse(bytes);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].nbytes, 84u);
  try {
    (void)h.tensors[0].dtype("t.gguf");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q2_K, which is not supported"), std::string::npos);
  }
}

TEST(Gguf, NoTensorsAndNoPadding) {
  GgufBuilder b;
  b.kv_u32("a", 1);
  std::string bytes = b.build();
  const GgufHeader h = parse(bytes.substr(0, b.kv_end()));
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_EQ(h.kv.at("a").u, 1u);
}

}  // namespace
}  // namespace dfl
