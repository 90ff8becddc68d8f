#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "st_builder.h"

namespace dfl {
namespace {

using test::make_st;
using test::TempDir;
using test::write_file;

// A safetensors file with F32 tensors of the given names and shapes, laid out back to back.
std::string st_with(const std::vector<std::pair<std::string, std::vector<int64_t>>>& ts,
                    const char* dtype = "F32", size_t es = 4) {
  std::string h = "{", data;
  for (const auto& [name, shape] : ts) {
    size_t n = es;
    std::string sh;
    for (int64_t d : shape) {
      n *= static_cast<size_t>(d);
      if (!sh.empty()) sh += ",";
      sh += std::to_string(d);
    }
    if (h.size() > 1) h += ",";
    h += "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + sh + "],\"data_offsets\":[" +
         std::to_string(data.size()) + "," + std::to_string(data.size() + n) + "]}";
    data += std::string(n, '\0');
  }
  return make_st(h + "}", data);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a dfl::Error";
  return "";
}

TEST(Checkpoint, SingleFileRequireAndMessages) {
  TempDir dir("ck");
  write_file(dir.path() / "model.safetensors",
             st_with({{"model.layers.0.self_attn.q_proj.weight", {64, 48}},
                      {"model.norm.weight", {32}},
                      {"model.mtp.0.weight", {2}},
                      {"lm_head.weight", {10, 32}}}));
  Checkpoint ck(dir.str());
  EXPECT_EQ(ck.size(), 4u);
  EXPECT_EQ(ck.files().size(), 1u);
  EXPECT_EQ(ck.names().front(), "lm_head.weight");  // sorted

  const TensorInfo& n = ck.require("model.norm.weight", kFloatWeights, {32});
  EXPECT_EQ(n.shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(ck.require("lm_head.weight", DType::kF32, {-1, 32}).shape[0], 10);  // wildcard

  const std::string shape = error_of([&] {
    ck.require("model.layers.0.self_attn.q_proj.weight", kFloatWeights, {64, 32});
  });
  EXPECT_EQ(shape.rfind("tensor 'model.layers.0.self_attn.q_proj.weight': expected shape [64, 32], "
                        "file has [64, 48]",
                        0),
            0u)
      << shape;
  const std::string rank = error_of([&] { ck.require("model.norm.weight", DType::kF32, {32, 1}); });
  EXPECT_NE(rank.find("expected shape [32, 1], file has [32]"), std::string::npos) << rank;
  const std::string dt = error_of([&] {
    ck.require("model.norm.weight", {DType::kBF16, DType::kF16}, {32});
  });
  EXPECT_NE(dt.find("tensor 'model.norm.weight': expected dtype BF16 or F16, file has F32"),
            std::string::npos)
      << dt;
  const std::string missing =
      error_of([&] { ck.require("model.embed_tokens.weight", DType::kF32, {5}); });
  EXPECT_NE(missing.find("tensor 'model.embed_tokens.weight'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("missing"), std::string::npos) << missing;

  EXPECT_EQ(ck.find("nope"), nullptr);
  EXPECT_TRUE(ck.contains("model.mtp.0.weight"));
  // q_proj was found (even though its shape was wrong), norm and lm_head were required.
  EXPECT_EQ(ck.unused_names(), (std::vector<std::string>{"model.mtp.0.weight"}));
  EXPECT_TRUE(ck.unused_names({"model.mtp."}).empty());
}

TEST(Checkpoint, ShardedWithIndex) {
  TempDir dir("ck");
  write_file(dir.path() / "model-00001-of-00002.safetensors", st_with({{"a", {2}}, {"b", {3}}}));
  write_file(dir.path() / "model-00002-of-00002.safetensors", st_with({{"c", {4}}}));
  write_file(
      dir.path() / "model.safetensors.index.json",
      R"({"metadata":{"total_size":36},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
      R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  Checkpoint ck(dir.str());
  EXPECT_EQ(ck.files().size(), 2u);  // each shard opened once
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ck.require("c", DType::kF32, {4}).file, dir.file("model-00002-of-00002.safetensors"));
}

TEST(Checkpoint, IndexErrors) {
  TempDir dir("ck");
  write_file(dir.path() / "s1.safetensors", st_with({{"a", {2}}}));
  write_file(dir.path() / "s2.safetensors", st_with({{"b", {2}}}));
  auto index = [&](const std::string& wm) {
    write_file(dir.path() / "model.safetensors.index.json", "{\"weight_map\":" + wm + "}");
  };
  index(R"({"a":"s1.safetensors","b":"s3.safetensors"})");
  std::string m = error_of([&] { Checkpoint ck(dir.str()); });
  EXPECT_NE(m.find("names shard 's3.safetensors'"), std::string::npos) << m;
  EXPECT_NE(m.find("does not exist"), std::string::npos) << m;

  index(R"({"a":"s1.safetensors","b":"s1.safetensors"})");
  m = error_of([&] { Checkpoint ck(dir.str()); });
  EXPECT_NE(m.find("tensor 'b' is in 's1.safetensors', but that shard does not hold it"),
            std::string::npos)
      << m;

  index(R"({"a":"../s1.safetensors"})");
  m = error_of([&] { Checkpoint ck(dir.str()); });
  EXPECT_NE(m.find("not a relative path inside the folder"), std::string::npos) << m;

  index(R"({"a":"s1.safetensors","b":"s2.safetensors")");  // unterminated
  m = error_of([&] { Checkpoint ck(dir.str()); });
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;

  write_file(dir.path() / "model.safetensors.index.json", R"({"weights":{}})");
  m = error_of([&] { Checkpoint ck(dir.str()); });
  EXPECT_NE(m.find("no \"weight_map\""), std::string::npos) << m;
}

TEST(Checkpoint, MiMoDrafterShardsWithAndWithoutIndex) {
  TempDir dir("ck");
  write_file(dir.path() / "dflash_draft_model-00001-of-00002.safetensors",
             st_with({{"model.layers.0.mlp.up_proj.weight", {4, 2}}}, "BF16", 2));
  write_file(dir.path() / "dflash_draft_model-00002-of-00002.safetensors",
             st_with({{"model.fc.weight", {2, 4}}}, "BF16", 2));
  write_file(dir.path() / "config.json", "{}");
  {
    Checkpoint ck(dir.str());  // no index: every *.safetensors
    EXPECT_EQ(ck.files().size(), 2u);
    EXPECT_EQ(ck.require("model.fc.weight", DType::kBF16, {2, 4}).dtype, DType::kBF16);
  }
  write_file(dir.path() / "dflash_draft_model.safetensors.index.json",
             R"({"weight_map":{"model.layers.0.mlp.up_proj.weight":)"
             R"("dflash_draft_model-00001-of-00002.safetensors",)"
             R"("model.fc.weight":"dflash_draft_model-00002-of-00002.safetensors"}})");
  Checkpoint ck(dir.str());
  EXPECT_EQ(ck.size(), 2u);
  EXPECT_NE(ck.find("model.layers.0.mlp.up_proj.weight"), nullptr);

  write_file(dir.path() / "other.safetensors.index.json", R"({"weight_map":{}})");
  const std::string m = error_of([&] { Checkpoint c2(dir.str()); });
  EXPECT_NE(m.find("several safetensors index files"), std::string::npos) << m;
}

TEST(Checkpoint, DuplicateAcrossFilesAndEmptyFolder) {
  TempDir dir("ck");
  write_file(dir.path() / "a.safetensors", st_with({{"x", {2}}}));
  write_file(dir.path() / "b.safetensors", st_with({{"x", {2}}}));
  const std::string m = error_of([&] { Checkpoint ck(dir.str()); });
  EXPECT_NE(m.find("tensor 'x' is stored twice"), std::string::npos) << m;

  TempDir empty("ck");
  const std::string e = error_of([&] { Checkpoint ck(empty.str()); });
  EXPECT_NE(e.find("has no model.safetensors"), std::string::npos) << e;
  EXPECT_THROW(Checkpoint(empty.file("nowhere")), Error);
}

TEST(Checkpoint, BadShardIsReportedWithItsPath) {
  TempDir dir("ck");
  write_file(dir.path() / "model.safetensors",
             make_st(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", "12345678"));
  const std::string m = error_of([&] { Checkpoint ck(dir.str()); });
  EXPECT_NE(m.find("model.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("tensor 'w'"), std::string::npos) << m;
}

TEST(DTypeSet, ContainsAndNames) {
  constexpr DTypeSet s{DType::kBF16, DType::kF32};
  EXPECT_TRUE(s.contains(DType::kF32));
  EXPECT_FALSE(s.contains(DType::kF16));
  EXPECT_EQ(s.to_string(), "F32 or BF16");
  EXPECT_TRUE(DTypeSet::any().contains(DType::kF8E4M3));
  EXPECT_EQ(DTypeSet().to_string(), "(none)");
}

}  // namespace
}  // namespace dfl
