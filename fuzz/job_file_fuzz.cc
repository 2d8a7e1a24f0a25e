// Fuzzes the job file parser (cli/job_file.h): any bytes a user hands to
// `bulwark submit` must give a JobFile or an InvalidArgument, never a crash
// or an exception escaping yaml-cpp.
#include <cstdint>
#include <string>

#include "cli/job_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  bulwark::Result<bulwark::cli::JobFile> job = bulwark::cli::ParseJobFile(text, "fuzz.yaml", "/bin/true");
  // A parsed job keeps the promises its consumers rely on.
  if (job.ok() && (job->world_size <= 0 || job->argv.empty() || job->world_size % job->ranks_per_machine != 0)) {
    __builtin_trap();
  }
  return 0;
}
