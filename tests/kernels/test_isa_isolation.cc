// The ISA files' one rule (kernels/cpu/cpu_kernels.h), checked on the shipped binary: no function
// that the linker may take from any of several object files — a weak symbol: an inline
// function or a template instantiation — holds AVX / AVX-512 code (ymm, zmm or mask registers).
// Such a function, instantiated in an -mavx512* file and in baseline code alike, can be the copy
// the linker keeps, and the binary then dies with SIGILL on an x86 without those instructions
// (an AVX2 machine for AVX-512 code), far from any kernel. No test on a machine that has the
// instructions would notice otherwise. The functions of the ISA namespaces themselves
// (dfl::cpu::avx512:: …) are only reached behind a CPUID check and are exempt.
// Reads `dflash` with binutils' nm and objdump (skipped where they are missing).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <regex>
#include <set>
#include <string>

namespace {

// Each line of a command's standard output to f; false if it could not run.
template <class F>
bool each_line(const std::string& cmd, F&& f) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) return false;
  char buf[8192];
  std::string line;
  while (std::fgets(buf, sizeof(buf), p.get())) {
    line += buf;
    if (line.back() != '\n') continue;  // a longer line: read on
    line.pop_back();
    f(line);
    line.clear();
  }
  return true;
}

bool in_isa_namespace(const std::string& name) {
  for (const char* ns : {"dfl::cpu::avx512::", "dfl::cpu::avx2::", "dfl::cpu::avx2_vnni::", "dfl::cpu::amx::"})
    if (name.find(ns) != std::string::npos) return true;
  return false;
}

TEST(IsaIsolation, NoWeakFunctionHoldsVectorIsaCode) {
  if (std::system("command -v nm >/dev/null 2>&1 && command -v objdump >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "binutils (nm, objdump) not found";
  const std::string bin = DFL_AUDITED_BINARY;
  std::set<std::string> weak;
  ASSERT_TRUE(each_line("nm -C --defined-only '" + bin + "'", [&](const std::string& l) {
    // "<address> <type> <name>": W / w weak, V / v weak object
    if (l.size() > 19 && l[16] == ' ' && l[18] == ' ' && (l[17] == 'W' || l[17] == 'w')) weak.insert(l.substr(19));
  }));
  ASSERT_GT(weak.size(), 100u) << "nm read nothing useful from " << bin;
  const std::regex header(R"(^[0-9a-f]+ <(.*)>:$)");
  const std::regex vector_reg(R"(%(ymm|zmm)[0-9]+|%k[0-7]\b)");
  std::set<std::string> offenders;
  std::string cur;
  bool cur_weak = false;
  size_t functions = 0;
  ASSERT_TRUE(each_line("objdump -d --no-show-raw-insn -C '" + bin + "'", [&](const std::string& l) {
    std::smatch m;
    if (!l.empty() && l[0] != ' ' && std::regex_match(l, m, header)) {
      cur = m[1];
      cur_weak = weak.count(cur) && !in_isa_namespace(cur);
      ++functions;
      return;
    }
    if (cur_weak && l.find('%') != std::string::npos && std::regex_search(l, vector_reg)) offenders.insert(cur);
  }));
  ASSERT_GT(functions, 1000u) << "objdump read nothing useful from " << bin;
  std::string list;
  for (const std::string& o : offenders) list += "\n  " + o;
  EXPECT_TRUE(offenders.empty()) << offenders.size()
                                 << " weak function(s) with AVX / AVX-512 code (an ISA file instantiated a shared "
                                    "inline function or template; keep it out of kernels/cpu/*_avx*.cc):"
                                 << list;
  std::printf("%zu functions, %zu weak: none with vector ISA code outside the ISA namespaces\n", functions,
              weak.size());
}

}  // namespace
