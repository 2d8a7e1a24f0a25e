// Fuzzes the signature table (agent/signatures.h), which a cluster extends
// with its own DIR/signatures.tsv: a bad line or regex is an InvalidArgument,
// never a crash. A parsed table is also matched against a few log lines, as
// the agent does when a rank dies.
#include <cstdint>
#include <string>
#include <vector>

#include "agent/signatures.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto table = bulwark::agent::SignatureTable::Parse(text, "fuzz.tsv");
  if (!table.ok()) return 0;
  static const std::vector<std::string> kLines = {
      "NCCL WARN Cuda failure 'unhandled cuda error'",
      "Traceback (most recent call last):",
      "ModuleNotFoundError: No module named 'torch'",
      "",
  };
  table->Match(kLines);
  return 0;
}
