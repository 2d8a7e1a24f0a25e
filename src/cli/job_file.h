// JOB.yaml: what `bulwark submit` reads.
//
//   name: demo                 # required: the job id
//   world_size: 2              # required: ranks in the job
//   ranks_per_machine: 1       # default 1
//   command: [/path/to/prog]   # default: bulwark-train next to bulwark
//   args: [--config, tiny]     # appended to command
//   env: {OMP_NUM_THREADS: "1"}
//   checkpoint:                # optional; in-memory checkpoints are taken every step
//     persist_every: 50        # also persist them to durable storage every N steps; 0: never
//   progress:                  # optional; steps read from each rank's output (common/progress_pattern.h)
//     regex: 'step (?P<step>\d+) loss (?P<loss>\S+)'
//   recovery:                  # optional; how faults are recovered (controller/job.h)
//     mode: requeue            # standby (default), elastic (survivors train on, docs/recovery.md)
//                              # or requeue (the conventional baseline)
//     provisioning_delay_s: 600  # requeue: modeled wait for machines acquired cold
//   policy:                    # optional; this job's own thresholds (controller/policy_fields.h),
//     slow_round: 5            # laid over the cluster's (`bulwark up --policy`)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::cli {

struct JobFile {
  std::string name;
  int world_size = 0;
  int ranks_per_machine = 1;
  std::vector<std::string> argv;  // command followed by args
  std::map<std::string, std::string> env;
  int persist_every = kDefaultPersistEvery;
  // parallel: {tp, pp[, dp]}: the job's layout (controller/topology.h);
  // dp 0: derived from the world size.
  int tp = 1, pp = 1, dp = 0;
  // progress.regex as written (named groups); "" when the job reports its
  // steps over the rank link or not at all. Submit puts it in `env`.
  std::string progress_regex;
  // recovery: the mode (standby, elastic or requeue) and requeue's modeled
  // provisioning delay (-1: the controller's default).
  std::string recovery = "standby";
  int provisioning_delay_s = -1;
  // policy: fields by name (times in seconds, flags 0/1), checked.
  std::map<std::string, double> policy;

  // The controller's default (controller/launch.h), repeated here because
  // the wire's 0 means "never", so the CLI must send the default itself.
  static constexpr int kDefaultPersistEvery = 50;
};

// Parses `text`; `source` names it in errors, which also name the field
// ("job.yaml: field 'world_size': expected a positive integer, got 'two'").
// `default_command` is used when the file has no `command`.
Result<JobFile> ParseJobFile(const std::string& text, const std::string& source,
                             const std::string& default_command);
Result<JobFile> LoadJobFile(const std::string& path, const std::string& default_command);

}  // namespace bulwark::cli
