// What `bulwark status` shows, copied out of the plane under its lock. The
// document is then rendered by a pure function of this copy, after the lock
// is released: at 12,500 machines it is 4 MiB of JSON and took 0.2-0.4 s to
// build under the lock, while every report and the liveness tick waited
// (issue 36). Copying what it is made of takes a few milliseconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/backup_plan.h"
#include "controller/job.h"
#include "controller/policy_fields.h"
#include "controller/standby_pool.h"

namespace bulwark::plane {

struct StatusView {
  double up_s = 0;
  std::string error;  // the journal's sticky error, "" none
  std::string metrics_url;  // "" when metrics are not served
  // The cluster's policy fields set away from their defaults (`bulwark up
  // --policy`); a job's own (its file's `policy:`) are in its entry.
  std::vector<controller::PolicyValue> policy;
  struct Machine {
    std::string id, dir, shard_addr, device_slowdown, domain;
    double last_heard_s_ago = 0;
    std::vector<int> live_ranks;
    int64_t generation = 0;
    std::vector<controller::ShardHolding> shards;
    std::string state = "registered";  // the policy's word, when it knows the machine
    std::optional<std::string> reason;
  };
  std::vector<Machine> machines;
  // The stop-time ladder, when it climbs (docs/ladder.md).
  struct Ladder {
    std::string state;
    bool idle = true;
    std::string rung, trigger;
    int64_t incident = 0;
    std::optional<double> deadline_in_s;
    size_t answered = 0;
  };
  struct Job {
    controller::JobSpec spec;
    int persist_every = 0;
    std::string durable_dir;
    std::string state, policy_state;
    controller::Placement placement;
    int64_t last_step = 0;
    std::optional<int64_t> done_step;
    std::string done_why;
    size_t incidents = 0;
    controller::BackupPlan plan;  // the current placement's backup peers
    std::vector<controller::ShardHolding> holdings;  // every agent's, in machine order
    // The implicit-fault detectors.
    bool armed = false;
    double hang_allowance_s = 0;
    std::string slow_round;
    double slow_max_unflagged = 0;
    double slow_max_unflagged_long = 0;  // the highest 30-round median that flagged nobody
    std::optional<std::string> tracing;  // the stack capture in flight
    std::vector<std::string> notes;
    Ladder ladder;
    // The periodic bitwise check beside the ranks (controller/policy_align.cc).
    struct Align {
      double every_s = 0;  // 0: off
      int64_t checks = 0, clean = 0, in_flight = 0;
      std::string last;
      int64_t clean_step = 0;  // where a drift found now would roll back to
    } align;
    controller::StandbyReport standby;
    std::vector<controller::PolicyValue> policy;  // the job's, where it differs from the defaults
  };
  std::optional<Job> job;  // none before a submit
};

// The status document (`bulwark status --json`): a pure function of the view.
nlohmann::json RenderStatus(const StatusView& v);

}  // namespace bulwark::plane
