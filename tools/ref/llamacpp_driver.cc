// A small driver over llama.cpp's public C API (llama.h), compiled by
// tools/ref/make_llamacpp_oracle.py against a llama.cpp build OUTSIDE this repo. It prints what
// llama.cpp itself computes, as JSON lines, for the oracle fixtures:
//   llamacpp_driver tokenize MODEL.gguf < lines.jsonl   — per input line {"text": s}:
//       {"ids": [...]} = llama_tokenize(s, add_special = false, parse_special = true)
//   llamacpp_driver tokenize_full MODEL.gguf < lines.jsonl — as tokenize, plus
//       "ids_special": llama_tokenize(s, add_special = true, parse_special = true) and
//       "pieces_hex": the bytes of llama_token_to_piece(id, special = true) of every id of
//       "ids", concatenated (what a streaming printer shows), as hex
//   llamacpp_driver eog MODEL.gguf — {"eog": [...]}: every id with llama_vocab_is_eog
//   llamacpp_driver greedy MODEL.gguf N < prompts.jsonl — per input line {"ids": [...]}: the N
//       greedy (argmax) next tokens after feeding the ids, one llama_decode for the prompt
//       then one per token, 2 threads: {"greedy": [...]}
//   Extra buffer types (weight repacking) as llama.cpp defaults; off with
//   DFLASH_LLAMA_NO_EXTRA_BUFTS=1 (see main()).
// Input lines are JSON objects with only those keys; strings are escaped by the caller with
// \uXXXX for every non-ASCII or control character (so this parser stays tiny).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

// Decodes the one JSON string value of `line` (after the first ':'), \u escapes included.
std::string json_string(const std::string& line) {
  size_t i = line.find(':');
  i = line.find('"', i) + 1;
  std::string out;
  auto put = [&](unsigned cp) {
    if (cp < 0x80) out += char(cp);
    else if (cp < 0x800) { out += char(0xC0 | cp >> 6); out += char(0x80 | (cp & 63)); }
    else if (cp < 0x10000) { out += char(0xE0 | cp >> 12); out += char(0x80 | (cp >> 6 & 63)); out += char(0x80 | (cp & 63)); }
    else { out += char(0xF0 | cp >> 18); out += char(0x80 | (cp >> 12 & 63)); out += char(0x80 | (cp >> 6 & 63)); out += char(0x80 | (cp & 63)); }
  };
  while (i < line.size() && line[i] != '"') {
    if (line[i] != '\\') { out += line[i++]; continue; }
    const char e = line[i + 1];
    i += 2;
    if (e == 'u') {
      unsigned cp = std::stoul(line.substr(i, 4), nullptr, 16);
      i += 4;
      if (cp >= 0xD800 && cp < 0xDC00) {  // surrogate pair
        const unsigned lo = std::stoul(line.substr(i + 2, 4), nullptr, 16);
        i += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      put(cp);
    } else {
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
    }
  }
  return out;
}

std::vector<llama_token> json_ids(const std::string& line) {
  std::vector<llama_token> ids;
  size_t i = line.find('[') + 1;
  while (i < line.size() && line[i] != ']') {
    char* end = nullptr;
    ids.push_back(static_cast<llama_token>(std::strtol(line.c_str() + i, &end, 10)));
    i = end - line.c_str();
    while (i < line.size() && (line[i] == ',' || line[i] == ' ')) ++i;
  }
  return ids;
}

void print_id_list(const std::vector<llama_token>& ids) {
  std::printf("[");
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ", %d" : "%d", ids[i]);
  std::printf("]");
}

void print_ids(const char* key, const std::vector<llama_token>& ids) {
  std::printf("{\"%s\": ", key);
  print_id_list(ids);
  std::printf("}\n");
}

std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& s, bool add_special) {
  int n = -llama_tokenize(vocab, s.data(), int32_t(s.size()), nullptr, 0, add_special, true);
  std::vector<llama_token> ids(std::max(n, 0));
  if (n > 0) llama_tokenize(vocab, s.data(), int32_t(s.size()), ids.data(), n, add_special, true);
  return ids;
}

std::string pieces(const llama_vocab* vocab, const std::vector<llama_token>& ids) {
  std::string out;
  char buf[512];
  for (llama_token id : ids) {
    const int n = llama_token_to_piece(vocab, id, buf, sizeof buf, 0, true);
    if (n > 0) out.append(buf, size_t(n));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s tokenize|tokenize_full|eog|greedy MODEL.gguf [N]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = mode == "tokenize" || mode == "tokenize_full" || mode == "eog";
  mp.n_gpu_layers = 0;
  // llama.cpp's default (extra buffer types = weight repacking) unless
  // DFLASH_LLAMA_NO_EXTRA_BUFTS=1: its AMX repack path segfaults on the Sapphire Rapids VM this
  // was written on (ggml_backend_amx_mul_mat, Aug 2026 mainline built with GGML_NATIVE) — use a
  // ggml-cpu built without AMX (make_llamacpp_oracle.py --ggml-cpu) or this switch.
  const char* ne = std::getenv("DFLASH_LLAMA_NO_EXTRA_BUFTS");
  mp.use_extra_bufts = !(ne && std::string(ne) == "1");
  llama_model* model = llama_model_load_from_file(argv[2], mp);
  if (!model) { std::fprintf(stderr, "cannot load %s\n", argv[2]); return 1; }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::string line;
  if (mode == "tokenize") {
    while (std::getline(std::cin, line)) print_ids("ids", tokenize(vocab, json_string(line), false));
  } else if (mode == "eog") {
    std::vector<llama_token> eog;
    for (llama_token id = 0; id < llama_vocab_n_tokens(vocab); ++id)
      if (llama_vocab_is_eog(vocab, id)) eog.push_back(id);
    print_ids("eog", eog);
  } else if (mode == "tokenize_full") {
    while (std::getline(std::cin, line)) {
      const std::string s = json_string(line);
      const std::vector<llama_token> ids = tokenize(vocab, s, false);
      std::printf("{\"ids\": ");
      print_id_list(ids);
      std::printf(", \"ids_special\": ");
      print_id_list(tokenize(vocab, s, true));
      std::printf(", \"pieces_hex\": \"");
      for (unsigned char c : pieces(vocab, ids)) std::printf("%02x", c);
      std::printf("\"}\n");
    }
  } else {
    const int n_gen = argc > 3 ? std::atoi(argv[3]) : 32;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 1024;
    cp.n_threads = cp.n_threads_batch = 2;
    llama_context* ctx = llama_init_from_model(model, cp);
    const int V = llama_vocab_n_tokens(vocab);
    while (std::getline(std::cin, line)) {
      std::vector<llama_token> ids = json_ids(line), out;
      llama_memory_clear(llama_get_memory(ctx), true);
      llama_batch b = llama_batch_get_one(ids.data(), int32_t(ids.size()));
      for (int k = 0; k < n_gen; ++k) {
        if (llama_decode(ctx, b)) { std::fprintf(stderr, "decode failed\n"); return 1; }
        const float* lg = llama_get_logits_ith(ctx, -1);
        llama_token best = 0;
        for (int v = 1; v < V; ++v) if (lg[v] > lg[best]) best = v;
        out.push_back(best);
        b = llama_batch_get_one(&out.back(), 1);
      }
      print_ids("greedy", out);
    }
    llama_free(ctx);
  }
  llama_model_free(model);
  return 0;
}
