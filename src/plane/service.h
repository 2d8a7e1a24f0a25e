// The controller's gRPC services: adapters from RPCs to the Plane, plus the
// token check. `RunController` is the `bulwark controller` process.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "plane/core.h"
#include "plane/job_journals.h"
#include "plane/journal_store.h"

namespace bulwark::plane {

struct ControllerOptions {
  std::string dir;          // the cluster directory: controller.db, token, controller.addr
  bool init = false;        // create the database (first start); otherwise it must exist
  // Prometheus /metrics on 127.0.0.1: this port; -1: the port recorded in
  // <dir>/controller.metrics by an earlier start (so a scrape config stays
  // valid across controller restarts), else any free port.
  int metrics_port = -1;
  // The stop-time ladder (docs/ladder.md): `bulwark up --ladder-rungs
  // diagnose,replay --ladder-tests compute,device --ladder-budget 60`;
  // empty keeps the default (ApplyLadderFlags in controller/ladder.h).
  std::string ladder_rungs, ladder_tests, ladder_budget_s;
  // The per-machine daily failure rate the standby target is sized for
  // (policy_config.h); empty keeps the default. `bulwark up --failure-rate`.
  std::string daily_failure_rate;
  // `--ladder-align-every SECONDS`: the periodic bitwise check (0: off).
  std::string ladder_align_every_s;
  // Proves that a machine can be reached where it advertised its ranks will
  // listen ("host:port", its agent's shard server), with the cluster token
  // (issue 40). The bulwark binary sets it (cli/main.cc: the agents' shard
  // handshake). Null: machines join on their word.
  std::function<Status(const std::string& addr, const std::string& token)> reach_probe;
  // HA (ha_controller.h): where the journal lives, null for the SQLite
  // database in `dir`; and whether this controller still leads, asked every
  // tick: false stops it acting at once, and RunController returns
  // Unavailable. Null: it always leads.
  std::function<Result<std::unique_ptr<JournalStore>>(bool create)> open_journal;
  // The named jobs' journals beside it (job_journals.h); null: SQLite files.
  std::shared_ptr<const JobJournals> job_journals;
  std::function<bool()> leading;
  // A JSON object whose keys `bulwark status` adds to the plane's (the HA
  // role and the leader's id); null: none.
  std::function<std::string()> ha_status;
};

// Serves until SIGTERM or SIGINT. The address comes from <dir>/controller.addr
// so that a restarted controller listens where its agents look for it. The
// metrics URL is written to <dir>/controller.metrics; a port that cannot be
// bound is logged and the controller serves on without metrics.
Status RunController(const ControllerOptions& options);

}  // namespace bulwark::plane
