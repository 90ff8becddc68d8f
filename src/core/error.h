// Error reporting for dflash.cpp.
//
// Contract: anything that can fail because of user input (files, configs, flags, prompts) throws
// dfl::Error with a one-line message that names the problem and what to fix. The CLI catches it,
// prints "dflash: <message>" on stderr and exits non-zero. Hot loops never throw or allocate;
// internal invariants use DFL_ASSERT (abort with location: a bug, not bad input).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dfl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// str(a, b, c): concatenates anything printable with operator<<.
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace dfl

// DFL_CHECK(cond, parts...): throws dfl::Error(str(parts...)) when cond is false.
#define DFL_CHECK(cond, ...)                              \
  do {                                                    \
    if (!(cond)) throw ::dfl::Error(::dfl::str(__VA_ARGS__)); \
  } while (0)

// DFL_ASSERT(cond): programming error; aborts with file:line.
#define DFL_ASSERT(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "dflash: internal error %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                \
    }                                                                              \
  } while (0)
