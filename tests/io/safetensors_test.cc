#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "st_builder.h"

namespace dfl {
namespace {

using test::make_st;

SafetensorsHeader parse(const std::string& bytes) {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                           "mem.safetensors");
}

// Parses and returns the error message; fails the test if parsing succeeds.
std::string error_of(const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a dfl::Error";
  return "";
}

#define EXPECT_ERR(bytes, ...)                                                                \
  do {                                                                                        \
    const std::string msg_ = error_of(bytes);                                                 \
    EXPECT_NE(msg_.find("mem.safetensors"), std::string::npos) << msg_;                       \
    for (const char* part_ : {__VA_ARGS__})                                                   \
      EXPECT_NE(msg_.find(part_), std::string::npos) << "'" << part_ << "' not in: " << msg_; \
  } while (0)

TEST(Safetensors, ParsesTensorsAndMetadata) {
  std::string data(4 * 6 + 2 * 2, '\0');
  const float f[6] = {1, 2, 3, 4, 5, 6};
  std::memcpy(data.data(), f, sizeof f);
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]}}  )";
  const std::string bytes = make_st(h, data);
  const auto st = parse(bytes);
  ASSERT_EQ(st.tensors.size(), 2u);
  EXPECT_EQ(st.metadata.at("format"), "pt");
  EXPECT_EQ(st.data_offset, 8 + h.size());
  const TensorInfo& w = st.tensors[0];  // offset order
  EXPECT_EQ(w.name, "w");
  EXPECT_EQ(w.dtype, DType::kF32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.nbytes, 24u);
  EXPECT_EQ(w.numel(), 6);
  EXPECT_EQ(w.data, reinterpret_cast<const uint8_t*>(bytes.data()) + 8 + h.size());
  float got[6];
  std::memcpy(got, w.data, 24);
  EXPECT_EQ(got[5], 6.f);
  EXPECT_EQ(st.tensors[1].name, "b");
  EXPECT_EQ(st.tensors[1].dtype, DType::kBF16);
}

TEST(Safetensors, ScalarsZeroSizeAndAllKnownDtypes) {
  const std::string h = R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                        R"("z":{"dtype":"I32","shape":[0,5],"data_offsets":[8,8]},)"
                        R"("a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[8,10]},)"
                        R"("b":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[10,11]},)"
                        R"("c":{"dtype":"BOOL","shape":[1],"data_offsets":[11,12]},)"
                        R"("d":{"dtype":"U8","shape":[1],"data_offsets":[12,13]},)"
                        R"("e":{"dtype":"I8","shape":[1],"data_offsets":[13,14]},)"
                        R"("f":{"dtype":"I16","shape":[1],"data_offsets":[14,16]},)"
                        R"("g":{"dtype":"I64","shape":[1],"data_offsets":[16,24]},)"
                        R"("h":{"dtype":"F16","shape":[2],"data_offsets":[24,28]}})";
  const auto st = parse(make_st(h, std::string(28, '\0')));
  EXPECT_EQ(st.tensors.size(), 10u);
}

TEST(Safetensors, TruncatedOrAbsurdHeaderLength) {
  EXPECT_ERR(std::string("\x01\x02", 2), "too small");
  EXPECT_ERR(make_st("{}", "", 1000), "past the end of the file");
  EXPECT_ERR(make_st("{}", "", int64_t{1} << 60), "absurd");
  EXPECT_ERR(make_st("", ""), "too small for a JSON object");
}

TEST(Safetensors, MalformedJson) {
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32",)", ""), "not valid JSON");
  EXPECT_ERR(make_st(R"([1,2,3])", ""), "does not start with '{'");
  EXPECT_ERR(make_st(R"({"w":[]})", ""), "tensor 'w'", "not a JSON object");
}

TEST(Safetensors, MissingOrInvalidFields) {
  EXPECT_ERR(make_st(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "abcd"), "tensor 'w'",
             "missing 'dtype'");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "abcd"), "tensor 'w'",
             "missing 'shape'");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd"), "tensor 'w'",
             "missing 'data_offsets'");
  EXPECT_ERR(make_st(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "abcd"),
             "'dtype' is not a string");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"),
             "tensor 'w'", "not a non-negative integer");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "abcd"),
             "not a non-negative integer");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "abcd"),
             "'shape' is not an array");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "abcd"),
             "'data_offsets' must be [begin, end]");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd"),
             "'data_offsets' must be [begin, end]");
  EXPECT_ERR(make_st(R"({"__metadata__":{"a":1}})", ""), "'__metadata__' value for 'a'");
  EXPECT_ERR(make_st(R"({"__metadata__":[]})", ""), "'__metadata__' is not a JSON object");
}

TEST(Safetensors, UnknownDtype) {
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}})", "a"), "tensor 'w'",
             "unknown dtype 'F4'");
}

TEST(Safetensors, OffsetsOutOfRangeOrReversed) {
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"),
             "tensor 'w'", "past the data section");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "abcd"),
             "tensor 'w'", "begin 4 > end 0");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})",
                     "abcd"),
             "past the data section");
}

TEST(Safetensors, OverlappingTensors) {
  EXPECT_ERR(make_st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     std::string(12, 'x')),
             "'a'", "'b'", "overlap");
  // Identical ranges overlap too; a zero-size tensor inside another does not.
  EXPECT_ERR(make_st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                     std::string(4, 'x')),
             "overlap");
  EXPECT_NO_THROW(parse(make_st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                R"("b":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}})",
                                std::string(4, 'x'))));
}

TEST(Safetensors, SizeMismatchAndOverflow) {
  EXPECT_ERR(
      make_st(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x')),
      "tensor 'w'", "byte size 8 does not match dtype BF16 x shape [3] = 6 bytes");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],)"
                     R"("data_offsets":[0,0]}})",
                     ""),
             "tensor 'w'", "overflows");
  // Product fits in u64 but times dtype size does not.
  EXPECT_ERR(
      make_st(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""),
      "overflows");
  // Overflowing partial product followed by a zero extent is an empty tensor, not an error.
  EXPECT_NO_THROW(parse(make_st(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16,0],)"
                                R"("data_offsets":[0,0]}})",
                                "")));
}

TEST(Safetensors, NonUtf8AndDuplicateNames) {
  EXPECT_ERR(
      make_st("{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd"),
      "not valid UTF-8 at byte 3 (after 'w')");
  EXPECT_ERR(make_st(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     std::string(8, 'x')),
             "tensor 'w' appears twice");
  EXPECT_ERR(make_st(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd"),
             "empty tensor name");
}

TEST(Safetensors, FileErrorsNameThePath) {
  test::TempDir dir("st");
  test::write_file(dir.path() / "bad.safetensors", make_st("{", ""));
  try {
    SafetensorsFile f(dir.file("bad.safetensors"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SafetensorsFile(dir.file("missing.safetensors")), Error);
  test::write_file(dir.path() / "empty.safetensors", "");
  EXPECT_THROW(SafetensorsFile(dir.file("empty.safetensors")), Error);
}

TEST(Safetensors, FileFindAndMove) {
  test::TempDir dir("st");
  test::write_file(
      dir.path() / "m.safetensors",
      make_st(R"({"x":{"dtype":"I8","shape":[3],"data_offsets":[0,3]}})", "\x01\x02\x03"));
  SafetensorsFile f(dir.file("m.safetensors"));
  const TensorInfo* x = f.find("x");
  ASSERT_NE(x, nullptr);
  const uint8_t* p = x->data;
  SafetensorsFile g = std::move(f);
  ASSERT_NE(g.find("x"), nullptr);
  EXPECT_EQ(g.find("x")->data, p);  // the mapping does not move
  EXPECT_EQ(p[2], 3);
  EXPECT_EQ(g.find("y"), nullptr);
}

}  // namespace
}  // namespace dfl
