// `bulwark update`, `bulwark rollback` and `bulwark releases`: the running
// job's releases (controller/releases.h, docs/recovery.md).
#pragma once

#include <string>

#include "common/status.h"

namespace bulwark::cli {

// `job`: which job of the fleet (submit --job NAME; plane/fleet.h), "" the
// first or the only one.
// Makes JOB.yaml the running job's next release: applied at the next
// restart, or at once with `now`. `default_command` as for submit. With a
// `job`, the release takes its name, as submit --job does.
Status UpdateCmd(const std::string& dir, const std::string& job, const std::string& job_path,
                 const std::string& default_command, bool now, const std::string& why);
// Back to release `to` (0: the one before the running one).
Status RollbackCmd(const std::string& dir, const std::string& job, int to, const std::string& why);
Status ReleasesCmd(const std::string& dir, const std::string& job, bool as_json);

}  // namespace bulwark::cli
