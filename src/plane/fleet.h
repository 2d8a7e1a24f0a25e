// Fleet: several jobs on one fleet of machines, behind one controller
// process (issue 36 item 3). Each job is a Plane of its own, with its own
// journal (DIR/jobs/NAME.db), policy core, generation, incidents and ledger;
// the fleet's main plane (DIR/controller.db) holds the machines no job
// holds: the one standby pool. The gRPC service asks the fleet which plane
// an agent's call goes to, by machine.
//
// A job submitted by name (`bulwark submit --job NAME`) takes the machines
// it needs from the pool and no standbys of its own. When it loses one, its
// policy decides WaitForMachines, and the fleet grants it machines from the
// pool in the order such decisions arrive, so the first job to need one gets
// the first. A granted machine joins the job as its agent reports there,
// exactly as a returned machine joins. A fault in one job reaches only that
// job's plane: its events come from its own machines, and no other job
// holds ranks on them.
//
// A job submitted without a name is the single job of today: it runs on the
// main plane, holds every machine and its standbys are its own. The two
// kinds do not mix on one fleet.
#pragma once

#include <map>
#include <unordered_map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "plane/job_journals.h"
#include "plane/plane.h"

namespace bulwark::plane {

class Fleet {
 public:
  // Opens the main plane with `options` and every job plane whose journal
  // is in options.job_journals (null: SQLite files in `jobs_dir`, NAME.db
  // each), so a controller SIGKILLed with several jobs replays all of them.
  // A job's machines leave the main plane.
  static Result<std::unique_ptr<Fleet>> Open(PlaneOptions options, std::string jobs_dir, Time now);

  // The plane that serves `machine`'s agent: its job's, else the main one.
  Plane* For(const std::string& machine) EXCLUDES(route_mu_);
  Plane* main() const { return main_.get(); }

  // `named`: one job of several (above); else the single job, on main.
  Result<std::string> Submit(JobLaunch launch, bool named, Time now) EXCLUDES(ops_mu_, route_mu_);
  // The plane of job `name`; "" the first named job, or main when none.
  Result<Plane*> Job(const std::string& name) EXCLUDES(route_mu_);

  // The main plane's status with `jobs`: every job's entry, each with its
  // `name`; `job` stays the first job's (the key scripts read today), and
  // every machine says which job holds it (`job`, absent for the pool's).
  nlohmann::json StatusJson(Time now) EXCLUDES(route_mu_);
  // Prometheus text for /metrics: the main plane's, and every job's with a
  // `job` label on each of its series (its machines', its incidents').
  std::string Metrics(Time now) EXCLUDES(route_mu_);
  void Tick(Time now) EXCLUDES(route_mu_);
  // Every plane's Serving: the port is open.
  void Serving(Time now) EXCLUDES(route_mu_);
  std::vector<Plane::ReachProbe> ProbesDue(Time now) EXCLUDES(route_mu_);
  void ProbeDone(const Plane::ReachProbe& probe, const Status& reached, Time now) EXCLUDES(route_mu_);

  // A granted machine that has not joined its job within this long may be
  // granted again (its agent died on the way).
  static constexpr Duration kGrantInFlight = std::chrono::seconds(5);

 private:
  Fleet(PlaneOptions options, std::shared_ptr<const JobJournals> journals)
      : options_(std::move(options)), journals_(std::move(journals)) {}
  // Options for job `name`'s plane: its own journal, and its wants to Grant.
  PlaneOptions JobOptions(const std::string& name, bool create);
  // Moves `machine` from the pool to `job`'s plane; false when the pool no
  // longer has it.
  bool MoveLocked(const std::string& machine, const std::string& job, Plane* to, Time now) REQUIRES(ops_mu_);
  // Job `name`'s own plane refused its submit: its machines go back to the
  // pool, its journal is removed, and the name is free to submit again.
  void UndoSubmitLocked(const std::string& name, Plane* p, const std::vector<MachineId>& moved, Time now)
      REQUIRES(ops_mu_);
  // Job `job` waits for `count` machines: the pool's first ones, less those
  // already on their way to it. What the pool lacks is asked again at each
  // Tick until granted (`again`: quietly).
  void Grant(const std::string& job, int count, Time now, bool again = false) EXCLUDES(ops_mu_);
  std::vector<std::pair<std::string, Plane*>> Jobs() EXCLUDES(route_mu_);

  // The pool sized as one job's standbys are (ByteRobust's P99 rule,
  // controller/standby_pool.h), over every job's machines: what it lacks
  // is asked of the cluster manager, less what is already on its way.
  // Tick calls it; status shows the last figures.
  struct Pool {
    int in_jobs = 0;     // machines the jobs' full widths need
    int target = 0;      // P(standby_quantile) of Binomial(in_jobs, daily_failure_rate)
    int available = 0;   // the pool's machines up now
    int on_the_way = 0;  // asked of the cluster manager, not arrived yet
  };
  Pool SizePool(Time now) EXCLUDES(ops_mu_);

  const PlaneOptions options_;
  const std::shared_ptr<const JobJournals> journals_;
  std::unique_ptr<Plane> main_;
  Logger log_{"controller"};
  // Moves between the pool and the jobs, one at a time (Submit, Grant). Never
  // held by a plane's deferred call's caller: Grant runs from one.
  Mutex ops_mu_;
  // Grants not yet joined: job -> (machine, when).
  std::map<std::string, std::vector<std::pair<std::string, Time>>> granted_ GUARDED_BY(ops_mu_);
  // Jobs whose last wait the pool could not fill: job -> machines it asked
  // for. Tick offers them the pool again, since a machine that joins the
  // pool later (a returned machine, an agent back after a controller
  // restart) is no decision of theirs.
  std::map<std::string, int> wanting_ GUARDED_BY(ops_mu_);
  // The pool's sizing (SizePool): its last figures and the requests made.
  Pool pool_ GUARDED_BY(ops_mu_);
  int64_t pool_requests_ GUARDED_BY(ops_mu_) = 0;
  // Who holds what; held briefly, never while calling into a plane.
  Mutex route_mu_;
  std::map<std::string, std::unique_ptr<Plane>> jobs_ GUARDED_BY(route_mu_);
  // machine -> its job's plane; looked up for every report (a hash, not a tree)
  std::unordered_map<std::string, Plane*> owner_ GUARDED_BY(route_mu_);
  // Planes of undone submits: kept, since a call routed to one just before
  // may still be in it (For hands out raw pointers).
  std::vector<std::unique_ptr<Plane>> retired_ GUARDED_BY(route_mu_);
};

}  // namespace bulwark::plane
