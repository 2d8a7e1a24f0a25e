// The bulwark binary's command line, declared with CLI11: one subcommand per
// command, each with its positionals and flags described, so that
// `bulwark --help` lists the commands, `bulwark up --help` lists up's flags,
// and an unknown command or flag is an error naming the nearest known one.
// What it parses fills the Args every command reads (cli/args.h).
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"
#include "common/status.h"

namespace bulwark::cli {

struct CommandLine {
  // positional[0] is the command, then its positionals; flags by name ("" for
  // a boolean flag given).
  Args args;
  // Set when help was asked for (--help anywhere, `help [COMMAND]`, or no
  // command at all): print it and exit 0; `args` is then empty.
  std::string help;
};

// `args` excludes the program's name. Errors are one line: the problem, then
// "run 'bulwark COMMAND --help'".
Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

}  // namespace bulwark::cli
