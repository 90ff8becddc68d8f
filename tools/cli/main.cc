// dflash — one binary, subcommands: run | inspect | tokenize | bench | serve | dump-taps.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "core/error.h"

namespace {
const char* kUsage =
    "dflash — DFlash speculative decoding engine (CPU)\n\n"
    "Usage: dflash <command> [flags]\n\n"
    "Commands:\n"
    "  run        generate text from a model folder, optionally with a DFlash drafter (--draft)\n"
    "  inspect    print a model folder's parsed config and per-layer attention table\n"
    "  tokenize   print the token ids (and pieces) of a text\n"
    "  bench      measure prefill, decode, verify cost and DFlash speed\n"
    "  serve      OpenAI-compatible HTTP server (chat / completions, streaming, metrics)\n"
    "  dump-taps  generate responses with the target and dump its tapped hidden states (drafter training data)\n\n"
    "Run 'dflash <command> --help' for the flags of a command.\n";
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "run") return dfl::cli::cmd_run(argc, argv);
    if (cmd == "inspect") return dfl::cli::cmd_inspect(argc, argv);
    if (cmd == "tokenize") return dfl::cli::cmd_tokenize(argc, argv);
    if (cmd == "bench") return dfl::cli::cmd_bench(argc, argv);
    if (cmd == "serve") return dfl::cli::cmd_serve(argc, argv);
    if (cmd == "dump-taps") return dfl::cli::cmd_dump_taps(argc, argv);
    std::fprintf(stderr, "dflash: unknown command '%s' (see dflash --help)\n", cmd.c_str());
    return 2;
  } catch (const dfl::Error& e) {
    std::fprintf(stderr, "dflash: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "dflash: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash: %s\n", e.what());
    return 1;
  }
}
