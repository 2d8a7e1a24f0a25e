// bulwark-prepare: the tokenizer side of `bulwark-train prepare`.
//
// A separate binary because Debian's libsentencepiece and libtorch cannot
// share a process: both register protobuf descriptors at load time and the
// process dies before main(). bulwark-train execs this for `prepare`.
#include <cstdio>
#include <string>
#include <vector>

#include "common/exit_codes.h"
#include "trainer/data/prepare.h"

int main(int argc, char** argv) {
  using namespace bulwark;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "prepare") args.erase(args.begin());
  auto opts = trainer::ParsePrepareArgs(args);
  Status s = opts.ok() ? trainer::Prepare(*opts) : opts.status();
  if (s.ok()) return kExitOk;
  std::fprintf(stderr, "bulwark-train prepare: error: %s\n", s.message().c_str());
  return ExitCodeFor(s);
}
