// The dflash binary as a user runs it: generation against the HF golden continuation, lossless
// speculative decoding through the CLI, inspect's JSON schema, and one-line errors with a
// non-zero exit for bad input (missing folders, malformed/corrupt files, bad flags, prompts).
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "common/models.h"
#include "io/gguf_builder.h"

namespace dfl::test {
namespace {

namespace fs = std::filesystem;

struct Proc {
  int rc = -1;
  std::string out, err;
};

// Runs `dflash <args>` with stdout and stderr captured separately.
Proc run_dflash(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("dfl_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "out").string(), err = (dir / "err").string();
  const std::string cmd = std::string(DFLASH_BIN) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  Proc p;
  const int st = std::system(cmd.c_str());
  p.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  p.out = read_text(out);
  p.err = read_text(err);
  return p;
}

std::string ids_csv(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

// A one-line error on stderr that mentions `needle`, and a non-zero exit.
void expect_error(const Proc& p, const std::string& needle) {
  EXPECT_NE(p.rc, 0) << p.err;
  EXPECT_NE(p.err.find("dflash: "), std::string::npos) << p.err;
  EXPECT_NE(p.err.find(needle), std::string::npos) << "stderr: " << p.err;
  EXPECT_EQ(std::count(p.err.begin(), p.err.end(), '\n'), 1) << p.err;
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("dfl_cli_case_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  // Copies a fixture folder into the temp dir.
  void copy_from(const std::string& src) {
    fs::copy(src, path_, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  }
 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(Cli, GreedyRunMatchesTransformersGolden) {
  for (const char* name : {"tied_gqa2", "gqa4_yarn", "sharded"}) {
    const std::string dir = fixture(std::string("qwen3/") + name);
    Golden g(dir + "/golden.safetensors");
    const auto prompt = g.i32("prompt_ids");
    const auto want = g.i32("greedy_ids");
    // f32 K/V: the reference oracle's own precision (the command line defaults to bf16).
    const Proc p = run_dflash("run --model " + dir + " --prompt-ids " + ids_csv(prompt) +
                              " --max-tokens 32 --ignore-eos --json --threads 2 --kv-dtype f32");
    ASSERT_EQ(p.rc, 0) << p.err;
    const auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), want) << name;
    EXPECT_EQ(j["stats"]["prompt_tokens"].get<int>(), int(prompt.size()));
    EXPECT_EQ(j["stats"]["generated_tokens"].get<int>(), 32);
  }
}

TEST(Cli, SpeculativeRunIsLosslessAndReportsStats) {
  // mixed_swa drafts for qwen3/tied_gqa2; zlab_full for qwen3/sharded.
  const std::pair<const char*, const char*> pairs[] = {{"tied_gqa2", "mixed_swa"}, {"sharded", "zlab_full"}};
  for (const auto& [target, draft] : pairs) {
    const std::string tdir = fixture(std::string("qwen3/") + target);
    const std::string ddir = fixture(std::string("dflash/") + draft + "/draft");
    Golden g(tdir + "/golden.safetensors");
    const std::string common = "run --model " + tdir + " --prompt-ids " + ids_csv(g.i32("prompt_ids")) +
                               " --max-tokens 32 --ignore-eos --json";
    const Proc plain = run_dflash(common);
    ASSERT_EQ(plain.rc, 0) << plain.err;
    for (int b : {2, 5, 8}) {
      const Proc spec = run_dflash(common + " --draft " + ddir + " --trace --block-size " + std::to_string(b));
      ASSERT_EQ(spec.rc, 0) << spec.err;
      const auto js = nlohmann::json::parse(spec.out);
      EXPECT_EQ(js["token_ids"], nlohmann::json::parse(plain.out)["token_ids"]) << target << " B=" << b;
      const auto& st = js["stats"];
      for (const char* key : {"draft_steps", "drafted_tokens", "accepted_tokens", "mean_acceptance_length",
                              "acceptance_histogram", "draft_s", "verify_s"})
        EXPECT_TRUE(st.contains(key)) << key;
      EXPECT_GE(st["mean_acceptance_length"].get<double>(), 1.0);
      ASSERT_TRUE(js.contains("cycles"));
      EXPECT_EQ(js["cycles"].size(), st["draft_steps"].get<size_t>());
      for (const auto& c : js["cycles"]) EXPECT_LE(c["drafted"].size(), size_t(b - 1));
    }
  }
}

TEST(Cli, TextPromptAndChatTemplate) {
  const std::string dir = fixture("default/target");
  Proc p = run_dflash("run --model " + dir + " --prompt \"hello world\" --max-tokens 4 --json");
  ASSERT_EQ(p.rc, 0) << p.err;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_GT(j["stats"]["prompt_tokens"].get<int>(), 0);
  p = run_dflash("run --model " + dir + " --chat --system \"be brief\" --prompt hi --max-tokens 4 --json");
  ASSERT_EQ(p.rc, 0) << p.err;
  j = nlohmann::json::parse(p.out);
  // <|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n
  // <think>\n\n</think>\n\n : far more tokens than the raw text.
  EXPECT_GT(j["stats"]["prompt_tokens"].get<int>(), 12);
  // Streaming mode prints text and a stats line on stderr.
  p = run_dflash("run --model " + dir + " --draft " + fixture("default/draft") + " --prompt hi --max-tokens 8");
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_NE(p.err.find("[stats]"), std::string::npos);
  EXPECT_NE(p.err.find("tau"), std::string::npos);
}

TEST(Cli, DumpTapsWritesShardsForEveryPrompt) {
  TempDir tmp;
  const std::string prompts = tmp.str() + "/p.jsonl", out = tmp.str() + "/dump";
  {
    std::ofstream f(prompts);
    f << "{\"prompt\": \"The quick brown fox\"}\n{\"prompt_ids\": [2, 40, 41]}\nplain text line\n";
  }
  const std::string base = "dump-taps --model " + fixture("default/target") + " --prompts " + prompts +
                           " --threads 1 --max-tokens 8 --ignore-eos";
  const Proc p = run_dflash(base + " --out " + out + " --layers 1,2 --temperature 0.7 --sampled-fraction 0.5");
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto meta = read_json(out + "/meta.json");
  EXPECT_EQ(meta["num_sequences"], 3);
  EXPECT_EQ(meta["aux_indices"], nlohmann::json({2, 3}));
  const auto& seqs = meta["shards"][0]["sequences"];
  ASSERT_EQ(seqs.size(), 3u);
  EXPECT_EQ(seqs[1][1].get<int>(), 3 + 8);  // prompt ids + 8 generated
  EXPECT_EQ(seqs[1][2].get<int>(), 3);
  int sampled = 0;
  for (const auto& s : seqs) sampled += s[3].get<int>();
  EXPECT_EQ(sampled, 1);  // every second prompt of 3: one
  const int64_t T = meta["num_tokens"].get<int64_t>();
  // taps: uint16 [T, 2 x 128] after a 128-byte header (a multiple of 64)
  const auto sz = fs::file_size(out + "/shard-00000.taps.npy");
  EXPECT_EQ(int64_t(sz) - T * 2 * 128 * 2, 128);
  expect_error(run_dflash(base + " --out " + out + " --layers 1,9"), "tap layer 9 is out of range");
  expect_error(run_dflash(base + " --out " + out), "--layers");
}

// Image (or other media) content parts in a --batch chat request: that line is refused with a
// clear message naming the part, the others run (every model is text-only).
TEST(Cli, BatchImageContentIsAClearError) {
  TempDir t;
  const std::string file = t.str() + "/req.jsonl";
  std::ofstream(file)
      << R"({"id": "ok", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})" "\n"
      << R"({"id": "img", "messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, )"
         R"({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}], "max_tokens": 2})" "\n"
      << R"({"id": "hf", "messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}], "max_tokens": 2})" "\n";
  const Proc p = run_dflash("run --model " + fixture("default/target") + " --batch " + file);
  EXPECT_NE(p.err.find("line 2: messages[0].content[1]: image input is not supported"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("line 3: messages[0].content[0]: image input is not supported"), std::string::npos) << p.err;
  EXPECT_NE(p.out.find("\"ok\""), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("\"img\""), std::string::npos) << p.out;
}

TEST(Cli, TokenizeJson) {
  const Proc p = run_dflash("tokenize --model " + fixture("default/target") + " --text \"<|im_start|>hi\" --json");
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  ASSERT_FALSE(j["ids"].empty());
  EXPECT_EQ(j["ids"][0].get<int>(), 507);  // the added special token, matched before BPE
  EXPECT_EQ(j["pieces"][0].get<std::string>(), "<|im_start|>");
}

// A llama.cpp gemma4 vocabulary GGUF (the tiny one of tests/fixtures/gguf/gemma4_tokenizer_llamacpp.json,
// written here from its lists): `dflash tokenize --model FILE.gguf --special` gives llama.cpp's ids.
TEST(Cli, TokenizeGemma4Gguf) {
  const auto o = nlohmann::json::parse(read_text(fixture("gguf/gemma4_tokenizer_llamacpp.json")));
  const auto& t = o["tiny"][0];
  GgufBuilder b;
  b.kv_str("general.architecture", "gemma4");
  b.kv_str("tokenizer.ggml.model", "gemma4");
  b.kv_str_array("tokenizer.ggml.tokens", t["tokens"].get<std::vector<std::string>>());
  b.kv_array<int32_t>("tokenizer.ggml.token_type", 5, t["types"].get<std::vector<int32_t>>());
  b.kv_str_array("tokenizer.ggml.merges", t["merges"].get<std::vector<std::string>>());
  b.kv_u32("tokenizer.ggml.bos_token_id", t["bos"].get<uint32_t>());
  b.kv_u32("tokenizer.ggml.eos_token_id", t["eos"].get<uint32_t>());
  b.kv_bool("tokenizer.ggml.add_bos_token", false);  // llama.cpp forces BOS for gemma4
  TempDir dir;
  const std::string gguf = dir.str() + "/tiny.gguf", text = dir.str() + "/text.txt";
  std::ofstream(gguf, std::ios::binary) << b.build();
  const size_t n = t["lines"].size();
  size_t ran = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string line = t["lines"][i].get<std::string>();
    if (line.find("<eos>") == std::string::npos && line.find("\n\n") == std::string::npos) continue;
    std::ofstream(text, std::ios::binary) << line;
    ++ran;
    const Proc p = run_dflash("tokenize --model " + gguf + " --file " + text + " --special --json");
    ASSERT_EQ(p.rc, 0) << p.err;
    EXPECT_EQ(nlohmann::json::parse(p.out)["ids"], t["ids_special"][i]) << nlohmann::json(line).dump();
  }
  EXPECT_EQ(ran, 5u);  // "<eos>hello</s><turn|>" and four lines with newline runs
}

// Hybrid targets: layer kinds, recurrent state bytes and the full-layer KV per token; drafters:
// the dialect and the tap table (tests/fixtures/configs, public values).
TEST(Cli, InspectShowsHybridStateAndDrafterTaps) {
  const Proc p = run_dflash("inspect " + fixture("configs/Qwen3.5-27B") + " --json");
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["family"], "qwen3_5");
  EXPECT_EQ(j["layers"][0]["mixer"], "gated_deltanet");
  EXPECT_EQ(j["layers"][3]["mixer"], "attention");
  EXPECT_EQ(j["layers"][3]["output_gate"], true);
  EXPECT_EQ(j["layers"][3]["rotary_dims"], 64);
  EXPECT_EQ(j["recurrent_state"]["linear_layers"], 48);
  EXPECT_EQ(j["recurrent_state"]["state_bytes_per_sequence"], 156893184);
  EXPECT_EQ(j["recurrent_state"]["engine_bytes_per_sequence"], 345538560);
  EXPECT_EQ(j["kv_cache"]["bf16_full_layers_bytes_per_token"], 65536);
  const Proc d = run_dflash("inspect " + fixture("configs/Qwen3.6-35B-A3B-speculator.dflash") + " --json");
  ASSERT_EQ(d.rc, 0) << d.err;
  const auto k = nlohmann::json::parse(d.out);
  EXPECT_EQ(k["dflash"]["dialect"], "speculators");
  EXPECT_EQ(k["dflash"]["target_layer_ids"], nlohmann::json({0, 9, 18, 27, 36}));
  EXPECT_EQ(k["dflash"]["taps"][1]["aux_index"], 10);
  EXPECT_EQ(k["dflash"]["draft_vocab_size"], 32000);
  const Proc t = run_dflash("inspect " + fixture("configs/Qwen3.6-35B-A3B-DFlash"));
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find("tap 7: target layer 37 -> aux 38"), std::string::npos) << t.out;
}

// Gemma 4 (public configs, tests/fixtures/configs, tools/ref/make_gemma4_configs.py): layer kinds
// (full attention at i % 6 == 5 with their own head_dim 512 / KV heads, V = raw K), KV bytes
// (bf16 per token of full layers: n_global × kv × 512 × 2 (K, V) × 2 B; per ring slot: n_sliding ×
// kv × 256 × 2 × 2 B; ring = window + block), and the drafter's tap table with the kinds of the
// tapped target layers (two of the six are global) and its two draft KV groups.
TEST(Cli, InspectGemma4TargetsAndDrafter) {
  struct Want { const char* name; int layers, global_kv, sliding_kv, bf16_per_token, bf16_per_slot; };
  for (const Want& w : {Want{"gemma-4-31B-it", 60, 4, 16, 10 * 4 * 512 * 2 * 2, 50 * 16 * 256 * 2 * 2},
                        Want{"gemma-4-26B-A4B-it", 30, 2, 8, 5 * 2 * 512 * 2 * 2, 25 * 8 * 256 * 2 * 2}}) {
    const Proc p = run_dflash("inspect " + fixture(std::string("configs/") + w.name) + " --json");
    ASSERT_EQ(p.rc, 0) << p.err;
    const auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["family"], "gemma4");
    ASSERT_EQ(j["layers"].size(), size_t(w.layers));
    for (int il = 0; il < w.layers; ++il) {
      const auto& l = j["layers"][il];
      const bool global = il % 6 == 5;
      EXPECT_EQ(l["attention"], global ? "full" : "sliding") << w.name << " " << il;
      EXPECT_EQ(l["head_dim"], global ? 512 : 256);
      EXPECT_EQ(l["num_kv_heads"], global ? w.global_kv : w.sliding_kv);
      EXPECT_EQ(l["v_from_k"], global);
      EXPECT_EQ(l["rope_type"], global ? "proportional" : "default");
      EXPECT_EQ(l["rotary_dims"], global ? 128 : 256);  // 0.25 of the 512-dim head turns
      EXPECT_EQ(l["sliding_window"], global ? 0 : 1024);
    }
    EXPECT_EQ(j["kv_cache"]["bf16_full_layers_bytes_per_token"], w.bf16_per_token) << w.name;
    EXPECT_EQ(j["kv_cache"]["bf16_sliding_bytes_per_slot"], w.bf16_per_slot) << w.name;
    EXPECT_EQ(j["kv_cache"]["sliding_ring_slots"], 1024 + 16);
  }
  const Proc m = run_dflash("inspect " + fixture("configs/gemma-4-26B-A4B-it"));
  ASSERT_EQ(m.rc, 0) << m.err;
  EXPECT_NE(m.out.find("\"n_routed_experts\":128"), std::string::npos) << m.out;
  const Proc d = run_dflash("inspect " + fixture("configs/gemma-4-31B-it-DFlash") + " --target " +
                            fixture("configs/gemma-4-31B-it") + " --json");
  ASSERT_EQ(d.rc, 0) << d.err;
  const auto k = nlohmann::json::parse(d.out);
  EXPECT_EQ(k["dflash"]["target_layer_ids"], nlohmann::json({1, 12, 23, 35, 46, 57}));
  EXPECT_EQ(k["dflash"]["mask_token_id"], 4);
  EXPECT_EQ(k["dflash"]["block_size"], 16);
  EXPECT_EQ(k["dflash"]["taps_on_full_attention_layers"], 2);
  EXPECT_EQ(k["dflash"]["taps"][2]["target_layer_kind"], "full");
  EXPECT_EQ(k["dflash"]["taps"][3]["target_layer_kind"], "full");
  EXPECT_EQ(k["dflash"]["taps"][0]["target_layer_kind"], "sliding");
  EXPECT_EQ(k["dflash"]["taps"][3]["aux_index"], 36);
  // Two draft KV groups: causal sliding (2048) layers in a ring, a non-causal full layer.
  for (int il = 0; il < 4; ++il) {
    EXPECT_EQ(k["layers"][il]["attention"], "sliding");
    EXPECT_EQ(k["layers"][il]["window"], nlohmann::json({2047, 0}));
  }
  EXPECT_EQ(k["layers"][4]["attention"], "full");
  EXPECT_EQ(k["layers"][4]["causal"], false);
  EXPECT_EQ(k["kv_cache"]["bf16_full_layers_bytes_per_token"], 8 * 128 * 2 * 2);
  EXPECT_EQ(k["kv_cache"]["bf16_sliding_bytes_per_slot"], 4 * 8 * 128 * 2 * 2);
  const Proc t = run_dflash("inspect " + fixture("configs/gemma-4-31B-it-DFlash") + " --target " +
                            fixture("configs/gemma-4-31B-it"));
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find("tap 3: target layer 35 (full) -> aux 36"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("2 of 6 taps on full-attention target layers"), std::string::npos) << t.out;
  // A drafter against a target it was not made for is refused (hidden 5376 vs 2816).
  const Proc bad = run_dflash("inspect " + fixture("configs/gemma-4-31B-it-DFlash") + " --target " +
                              fixture("configs/gemma-4-26B-A4B-it"));
  EXPECT_NE(bad.rc, 0);
}

TEST(Cli, InspectWorksOnAConfigOnlyFolder) {
  TempDir t;
  fs::copy_file(fixture("dflash/mixed_swa/draft/config.json"), t.str() + "/config.json");
  const Proc p = run_dflash("inspect " + t.str() + " --json");
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  const auto meta = read_json(fixture("dflash/mixed_swa/meta.json"));
  EXPECT_EQ(j["architecture"], "DFlashDraftModel");
  ASSERT_EQ(j["layers"].size(), 3u);
  // sliding(4) causal, full non-causal, sliding(4) causal — the §3.1 resolution.
  EXPECT_EQ(j["layers"][0]["attention"], "sliding");
  EXPECT_EQ(j["layers"][0]["window"], nlohmann::json({3, 0}));
  EXPECT_EQ(j["layers"][0]["causal"], true);
  EXPECT_EQ(j["layers"][1]["attention"], "full");
  EXPECT_EQ(j["layers"][1]["window"], nlohmann::json({-1, -1}));
  EXPECT_EQ(j["layers"][1]["causal"], false);
  EXPECT_EQ(j["layers"][0]["sinks"], false);
  EXPECT_EQ(j["dflash"]["block_size"], 8);
  EXPECT_EQ(j["dflash"]["mask_token_id"], 511);
  EXPECT_EQ(j["dflash"]["target_layer_ids"], nlohmann::json({0, 1}));
  EXPECT_TRUE(j["dflash"]["mask_embedding"].is_null());
  // MiMo-style: symmetric windows from use_swa, sinks, mask embedding path.
  const Proc m = run_dflash("inspect " + fixture("dflash/mimo_style/draft") + " --json");
  ASSERT_EQ(m.rc, 0) << m.err;
  const auto jm = nlohmann::json::parse(m.out);
  EXPECT_EQ(jm["layers"][0]["window"], nlohmann::json({3, 3}));
  EXPECT_EQ(jm["layers"][0]["sinks"], true);
  EXPECT_TRUE(jm["dflash"]["mask_embedding"].is_string());
}

// The published Qwen3.8-27B-DFlash2 drafter: DFlash2 layout (conv + selector sizes), symmetric
// sliding windows of 2048 (top-level is_causal false), the tap table.
TEST(Cli, InspectShowsDFlash2Layout) {
  const Proc p = run_dflash("inspect " + fixture("configs/Qwen3.8-27B-DFlash2") + " --json");
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["architecture"], "DFlash2DraftModel");
  const auto& v = j["dflash"]["dflash2"];
  ASSERT_TRUE(v.is_object()) << p.out;
  EXPECT_EQ(v["conv_kernel_size"], 2);
  EXPECT_EQ(v["conv_groups"], 320);
  EXPECT_EQ(v["selector_rank"], 256);
  EXPECT_EQ(v["selector_top_k"], 16);
  EXPECT_EQ(v["selector_params"], 256LL * (5120 + 2 * 248320));
  EXPECT_EQ(j["dflash"]["taps"][4]["aux_index"], 62);
  EXPECT_EQ(j["layers"][0]["window"], nlohmann::json({2047, 2047}));
  EXPECT_EQ(j["layers"][0]["causal"], false);
  const Proc t = run_dflash("inspect " + fixture("configs/Qwen3.8-27B-DFlash2"));
  EXPECT_NE(t.out.find("DFlash2: grouped dynamic causal conv"), std::string::npos) << t.out;
  const Proc z = run_dflash("inspect " + fixture("dflash/zlab_full/draft") + " --json");
  EXPECT_TRUE(nlohmann::json::parse(z.out)["dflash"]["dflash2"].is_null());
}

TEST(Cli, ImpossibleConfigsAreRefused) {
  auto inspect_with = [](const nlohmann::json& cfg) {
    TempDir t;
    std::ofstream(t.str() + "/config.json") << cfg.dump();
    return run_dflash("inspect " + t.str() + " --json");
  };
  auto base = read_json(fixture("dflash/zlab_full/draft/config.json"));
  auto c = base;
  c["dflash_config"]["use_swa"] = true;  // sliding, but no window size anywhere
  c.erase("sliding_window");
  expect_error(inspect_with(c), "sliding");
  c = base;
  c["layer_types"] = {"full_attention", "chunked_attention"};
  expect_error(inspect_with(c), "unknown layer type");
  c = base;
  c["dflash_config"]["mask_token_id"] = 100000;
  expect_error(inspect_with(c), "mask_token_id");
  c = base;
  c["architectures"] = {"GPTNeoXForCausalLM"};
  c.erase("dflash_config");
  expect_error(inspect_with(c), "unknown architecture");
}

TEST(Cli, BadInputGivesOneLineErrors) {
  const std::string model = fixture("qwen3/tied_gqa2");
  expect_error(run_dflash("run --model /nonexistent/model --prompt hi"), "does not exist");
  expect_error(run_dflash("run --model " + model + " --prompt hi --bogus-flag"), "unknown flag");
  expect_error(run_dflash("run --model " + model + " --prompt \"\""), "empty");
  expect_error(run_dflash("run --model " + model + " --prompt-ids 1,2,x"), "not a token id");
  expect_error(run_dflash("run --model " + model + " --prompt-ids 1,2,3 --max-tokens abc"), "integer");
  expect_error(run_dflash("run --model " + model + " --prompt-ids 1,2,3,4,5,6,7,8,9 --ctx-size 4"),
               "context");
  expect_error(run_dflash("run --model " + model + " --prompt-ids 99999"), "out of range");
  // mimo_style taps target layer 2; tied_gqa2 has 2 layers.
  expect_error(run_dflash("run --model " + model + " --draft " + fixture("dflash/mimo_style/draft") +
                          " --prompt hi"),
               "target_layer_ids");
  {
    TempDir t;  // a drafter whose fc was trained for 2 taps, configured with 1
    t.copy_from(fixture("dflash/zlab_full/draft"));
    auto cfg = read_json(t.str() + "/config.json");
    cfg["dflash_config"]["target_layer_ids"] = {1};
    std::ofstream(t.str() + "/config.json") << cfg.dump();
    expect_error(run_dflash("run --model " + model + " --draft " + t.str() + " --prompt hi"),
                 "fc input width");
  }
  {
    TempDir t;  // malformed config.json
    t.copy_from(model);
    std::ofstream(t.str() + "/config.json") << "{ \"hidden_size\": 64, ";
    expect_error(run_dflash("run --model " + t.str() + " --prompt hi"), "not valid JSON");
  }
  {
    TempDir t;  // truncated safetensors: header says more data than the file holds
    t.copy_from(model);
    fs::resize_file(t.str() + "/model.safetensors", 4096);
    expect_error(run_dflash("run --model " + t.str() + " --prompt hi"), "model.safetensors");
  }
  {
    TempDir t;  // header length past the end of the file
    t.copy_from(model);
    std::fstream f(t.str() + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t huge = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&huge), 8);
    f.close();
    expect_error(run_dflash("run --model " + t.str() + " --prompt hi"), "model.safetensors");
  }
  {
    TempDir t;  // no tokenizer: a text prompt cannot be encoded
    fs::copy_file(model + "/config.json", t.str() + "/config.json");
    fs::copy_file(model + "/model.safetensors", t.str() + "/model.safetensors");
    expect_error(run_dflash("run --model " + t.str() + " --prompt hi"), "tokenizer.json");
  }
}

TEST(Cli, HelpAndUsage) {
  for (const char* cmd : {"run", "inspect", "tokenize", "bench"}) {
    const Proc p = run_dflash(std::string(cmd) + " --help");
    EXPECT_EQ(p.rc, 0) << cmd;
    EXPECT_NE(p.out.find("Usage: dflash"), std::string::npos) << cmd;
  }
  EXPECT_EQ(run_dflash("--help").rc, 0);
  expect_error(run_dflash("frobnicate"), "unknown command");
}

}  // namespace
}  // namespace dfl::test

namespace dfl::test {
namespace {

// --kv-dtype bf16 through the binary: speculative == target-only (both bf16 KV), inspect counts
// bf16 bytes (half of f32 on a model without sliding rings), a bad name is a one-line error.
TEST(Cli, KvDtypeBf16) {
  const std::string tdir = fixture("qwen3/tied_gqa2");
  Golden g(tdir + "/golden.safetensors");
  const std::string common = "run --model " + tdir + " --prompt-ids " + ids_csv(g.i32("prompt_ids")) +
                             " --max-tokens 32 --ignore-eos --json --kv-dtype bf16";
  const Proc plain = run_dflash(common);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  const Proc spec = run_dflash(common + " --draft " + fixture("dflash/mixed_swa/draft") + " --block-size 5");
  ASSERT_EQ(spec.rc, 0) << spec.err;
  EXPECT_EQ(nlohmann::json::parse(spec.out)["token_ids"], nlohmann::json::parse(plain.out)["token_ids"]);
  // bf16 is the command line's default; f32 on request.
  const Proc i32 = run_dflash("inspect " + fixture("configs/Qwen3.5-27B") + " --json --kv-dtype f32");
  const Proc i16 = run_dflash("inspect " + fixture("configs/Qwen3.5-27B") + " --json");
  ASSERT_EQ(i32.rc, 0) << i32.err;
  ASSERT_EQ(i16.rc, 0) << i16.err;
  const auto a = nlohmann::json::parse(i32.out)["kv_cache"], b = nlohmann::json::parse(i16.out)["kv_cache"];
  EXPECT_EQ(a["dtype"], "f32");
  EXPECT_EQ(b["dtype"], "bf16");
  EXPECT_EQ(b["bytes_per_sequence"].get<int64_t>() * 2, a["bytes_per_sequence"].get<int64_t>());
  expect_error(run_dflash("run --model " + tdir + " --prompt-ids 1 --kv-dtype f16"), "--kv-dtype");
}

}  // namespace
}  // namespace dfl::test

namespace dfl::test {
namespace {

// --ggml-act on the real Gemma-3-270M Q4_K_M (skipped when absent; tools/models/gemma3_270m.sh):
// the default int8x2 continues three prompts of the transformers oracle exactly as transformers
// did (8 greedy tokens; tests/fixtures/gguf/gemma3_270m_oracle.json), int8 (llama.cpp's one-int8
// activations) leaves that path on at least one of them (near ties its noise flips: measured,
// int8 diverges from transformers within 32 tokens on 9 of the 20 prompts, int8x2 on none),
// speculative decoding under int8 is lossless against int8 target-only, and a bad mode is a
// one-line error.
TEST(Cli, GgmlActSetsTheGgufActivationMode) {
  const std::string model = real_gemma3_path();
  if (!fs::exists(model)) GTEST_SKIP() << "real model absent: run tools/models/gemma3_270m.sh";
  const auto oracle = read_json(fixture("gguf/gemma3_270m_oracle.json"));
  auto tokens = [&](const std::vector<int32_t>& prompt, const std::string& flags) {
    const Proc p = run_dflash("run --model " + model + " --prompt-ids " + ids_csv(prompt) +
                              " --max-tokens 8 --ignore-eos --json --threads 2 " + flags);
    EXPECT_EQ(p.rc, 0) << p.err;
    return p.rc == 0 ? nlohmann::json::parse(p.out)["token_ids"].get<std::vector<int32_t>>()
                     : std::vector<int32_t>{};
  };
  int moved = 0;
  for (int i : {2, 11, 13}) {
    const auto& op = oracle["prompts"][size_t(i)];
    const auto prompt = op["ids"].get<std::vector<int32_t>>();
    auto want = op["greedy"].get<std::vector<int32_t>>();
    want.resize(8);
    EXPECT_EQ(tokens(prompt, ""), want) << "prompt " << i << ": the default is int8x2";
    const auto int8 = tokens(prompt, "--ggml-act int8");
    moved += int8 != want;
    if (i == 2) {
      EXPECT_EQ(tokens(prompt, "--ggml-act int8x2"), want) << "prompt " << i;
      EXPECT_EQ(tokens(prompt, "--ggml-act int8 --draft " + repo_root() + "/models/gemma3-270m-dflash"), int8)
          << "lossless under int8";
    }
  }
  EXPECT_GE(moved, 1) << "--ggml-act int8 changed nothing";
  expect_error(run_dflash("run --model " + model + " --prompt-ids 2 --ggml-act int4"), "--ggml-act");
}

}  // namespace
}  // namespace dfl::test
