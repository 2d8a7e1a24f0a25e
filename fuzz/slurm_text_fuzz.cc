// Fuzzes what the Slurm backend reads (cluster/slurm/slurm_text.h): the
// output of scontrol, squeue and sbatch, which a Slurm of another version
// may print differently, and DIR/backend.json. Anything is a value or an
// error, never a crash. A decoded record's command lines are built too.
#include <cstdint>
#include <string>

#include "cluster/slurm/slurm_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (auto node = bulwark::cluster::ParseNodeLine(text); node.ok()) bulwark::cluster::DrainedByBulwark(*node);
  bulwark::cluster::ParseLines(text);
  // Crashes are what the harness looks for; a refusal is a fine answer.
  bulwark::cluster::ParseSubmittedJob(text).IgnoreError();
  bulwark::cluster::ParseSteps(text);
  bulwark::cluster::DrainReason(text);
  if (auto r = bulwark::cluster::DecodeSlurmRecord(text); r.ok()) {
    for (const std::string& node : r->agents) bulwark::cluster::AgentStepArgv(*r, node);
    bulwark::cluster::AgentJobArgv(*r, "log", "");
  }
  return 0;
}
