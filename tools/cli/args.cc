#include "args.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace dfl::cli {

Args::Args(const std::vector<FlagSpec>& specs, int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() < 2 || a[0] != '-') {
      positional_.push_back(a);
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == a) spec = &s;
    DFL_CHECK(spec, "unknown flag '", a, "' (see --help)");
    if (spec->value.empty()) {
      DFL_CHECK(!inline_value, "flag '", a, "' takes no value");
      values_[a] = "1";
    } else {
      if (!inline_value) {
        DFL_CHECK(i + 1 < argc, "flag '", a, "' needs a value (", spec->value, ")");
        value = argv[++i];
      }
      values_[a] = value;
    }
  }
}

std::string Args::str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

int64_t Args::integer(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  DFL_CHECK(errno == 0 && end && *end == '\0' && !it->second.empty(), "flag '", name,
            "' needs an integer, got '", it->second, "'");
  return v;
}

double Args::number(const std::string& name, double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  DFL_CHECK(errno == 0 && end && *end == '\0' && !it->second.empty(), "flag '", name,
            "' needs a number, got '", it->second, "'");
  return v;
}

std::string usage(const std::string& synopsis, const std::vector<FlagSpec>& specs) {
  std::ostringstream os;
  os << "Usage: " << synopsis << "\n\nFlags:\n";
  for (const auto& s : specs) {
    std::string left = "  " + s.name + (s.value.empty() ? "" : " " + s.value);
    if (left.size() < 28) left.resize(28, ' ');
    else left += "  ";
    os << left << s.help << "\n";
  }
  return os.str();
}

}  // namespace dfl::cli
