// The bulwark binary's command line as the commands read it: positional
// words and --flags (parsed by cli/commands.h), and the few lookups every
// subcommand shares.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::cli {

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
  bool Has(const std::string& k) const { return flags.count(k) != 0; }
  std::string Get(const std::string& k, const std::string& def = "") const {
    auto it = flags.find(k);
    return it == flags.end() ? def : it->second;
  }
};

// The directory of the running executable (bulwark-train lives beside it).
std::string ExeDir();
// --dir, else $BULWARK_DIR, else ./.bulwark.
std::string ClusterDir(const Args& a);
// --key as an integer, `def` when absent; InvalidArgument naming the flag.
Result<int> IntFlag(const Args& a, const std::string& key, int def);

}  // namespace bulwark::cli
