// Minimal command-line flag parser for the dflash subcommands: every flag is declared with its
// help text; an unknown flag, a missing value or a malformed number is a dfl::Error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dfl::cli {

struct FlagSpec {
  std::string name;   // "--max-tokens"
  std::string value;  // value placeholder ("N"), empty for a boolean switch
  std::string help;
};

class Args {
 public:
  // Parses argv[first..argc). Positional arguments are collected in order.
  Args(const std::vector<FlagSpec>& specs, int argc, char** argv, int first);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& def = "") const;
  int64_t integer(const std::string& name, int64_t def) const;
  double number(const std::string& name, double def) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// "Usage: ..." text for a subcommand.
std::string usage(const std::string& synopsis, const std::vector<FlagSpec>& specs);

}  // namespace dfl::cli
