#include "plane/fleet.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

#include "common/metrics_text.h"
#include "controller/standby_pool.h"

namespace bulwark::plane {
namespace {

using nlohmann::json;

// A job's name is its journal's file name: nothing that walks out of the
// jobs directory.
Status CheckJobName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                  });
  if (ok) return Status::OK();
  return Status::InvalidArgument("job name '" + name + "': use letters, digits, '-', '_' or '.' (64 at most)");
}

// A sample line of job `job`'s plane, labelled with it unless it names a
// job already (the job families do).
std::string Labelled(const std::string& line, const std::string& job) {
  const size_t end = line.find_first_of("{ ");
  if (job.empty() || end == std::string::npos) return line;
  const std::string label = "job=\"" + EscapeLabelValue(job) + "\"";
  if (line[end] == ' ') return line.substr(0, end) + "{" + label + "}" + line.substr(end);
  const size_t close = line.find('}', end);
  if (line.compare(end + 1, 5, "job=\"") == 0 || line.find(",job=\"", end) < close) return line;
  return line.substr(0, end + 1) + label + "," + line.substr(end + 1);
}

// Several planes' expositions as one (`parts`: job, its text; "" the main
// plane): the text format refuses a family declared twice, so each family's
// # HELP and # TYPE come once, followed by every plane's samples of it.
std::string MergeMetrics(const std::vector<std::pair<std::string, std::string>>& parts) {
  std::vector<std::string> order;  // families as first declared
  std::map<std::string, std::string> head, samples;
  for (const auto& [job, text] : parts) {
    std::istringstream in(text);
    std::string family;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("# ", 0) == 0) {
        if (line.rfind("# HELP ", 0) == 0) {
          family = line.substr(7, line.find(' ', 7) - 7);
          if (head.count(family) == 0) order.push_back(family);
        }
        if (head[family].find(line.substr(0, 6)) == std::string::npos) head[family] += line + "\n";
      } else if (!line.empty()) {
        samples[family] += Labelled(line, job) + "\n";
      }
    }
  }
  std::string out;
  for (const std::string& f : order) out += head[f] + samples[f];
  return out;
}

}  // namespace

Result<std::unique_ptr<Fleet>> Fleet::Open(PlaneOptions options, std::string jobs_dir, Time now) {
  std::shared_ptr<const JobJournals> journals =
      options.job_journals ? options.job_journals : SqliteJobJournals(std::move(jobs_dir));
  std::unique_ptr<Fleet> f(new Fleet(options, std::move(journals)));
  Result<std::unique_ptr<Plane>> main = Plane::Open(std::move(options), now);
  if (!main.ok()) return main.status();
  f->main_ = std::move(*main);
  Result<std::vector<std::string>> names = f->journals_->Names();
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    Result<std::unique_ptr<Plane>> job = Plane::Open(f->JobOptions(name, /*create=*/false), now);
    if (!job.ok()) return job.status().Annotate("job " + name + " of the fleet");
    Plane* p = job->get();
    // The machines it knows are its own (a machine leaves the pool for a
    // job and never goes back), whatever the main plane's store still says.
    for (const MachineId& m : p->Machines()) {
      f->main_->Forget(m);
      MutexLock lock(&f->route_mu_);
      f->owner_[m] = p;
    }
    {
      MutexLock lock(&f->route_mu_);
      f->jobs_[name] = std::move(*job);
    }
    // A job that waited for machines when the controller died is offered
    // the pool from the first Tick, not only at its next decision.
    if (const int n = p->WaitingFor(); n > 0) {
      MutexLock ops(&f->ops_mu_);
      f->wanting_[name] = n;
      f->log_.Info("job " + name + " waits for " + std::to_string(n) + " machine(s), as before the restart");
    }
  }
  return f;
}

PlaneOptions Fleet::JobOptions(const std::string& name, bool create) {
  PlaneOptions o = options_;
  o.create = create;
  o.open_journal = [journals = journals_, name](bool c) { return journals->Open(name, c); };
  o.wants_machines = [this, name](int count, Time now) { Grant(name, count, now); };
  o.log_prefix = "job " + name + ": ";
  o.job_name = name;
  o.job_name = name;
  return o;
}

Plane* Fleet::For(const std::string& machine) {
  MutexLock lock(&route_mu_);
  if (owner_.empty()) return main_.get();
  auto it = owner_.find(machine);
  return it == owner_.end() ? main_.get() : it->second;
}

std::vector<std::pair<std::string, Plane*>> Fleet::Jobs() {
  MutexLock lock(&route_mu_);
  std::vector<std::pair<std::string, Plane*>> out;
  for (const auto& [name, p] : jobs_) out.push_back({name, p.get()});
  return out;
}

Result<Plane*> Fleet::Job(const std::string& name) {
  MutexLock lock(&route_mu_);
  if (name.empty()) return jobs_.empty() ? main_.get() : jobs_.begin()->second.get();
  auto it = jobs_.find(name);
  if (it != jobs_.end()) return it->second.get();
  std::string known;
  for (const auto& [n, p] : jobs_) known += (known.empty() ? "" : ", ") + n;
  return Status::NotFound("no job '" + name + "' on this fleet" + (known.empty() ? "" : "; its jobs: " + known));
}

bool Fleet::MoveLocked(const std::string& machine, const std::string& job, Plane* to, Time now) {
  std::optional<wire::RegisterRequest> reg = main_->Forget(machine);
  if (!reg) return false;
  {
    MutexLock lock(&route_mu_);
    owner_[machine] = to;
  }
  // Registered where it now belongs, as it last registered; its next report
  // and its next command stream go there.
  if (Status st = to->Handover(*reg, now); !st.ok()) {
    log_.Warn("machine " + machine + " to job " + job + ": " + st.ToString());
  }
  granted_[job].push_back({machine, now});
  return true;
}

Result<std::string> Fleet::Submit(JobLaunch launch, bool named, Time now) {
  if (!named) {
    if (!Jobs().empty()) {
      return Status::FailedPrecondition("this fleet runs named jobs; submit with --job NAME");
    }
    return main_->Submit(std::move(launch), now);
  }
  const std::string name = launch.spec.id;
  BULWARK_RETURN_IF_ERROR(CheckJobName(name));
  BULWARK_RETURN_IF_ERROR(launch.spec.Validate());
  if (main_->HasJob()) {
    return Status::FailedPrecondition("a job submitted without --job holds this whole fleet; named jobs need "
                                      "'bulwark down' and 'bulwark up' first");
  }
  if (Job(name).ok()) return Status::FailedPrecondition("job " + name + " already runs on this fleet");
  Result<std::unique_ptr<Plane>> job = Plane::Open(JobOptions(name, /*create=*/true), now);
  if (!job.ok()) return job.status();
  Plane* p = job->get();
  std::vector<MachineId> moved;
  {
    MutexLock ops(&ops_mu_);
    const std::vector<MachineId> free = main_->LiveMachines(now);
    const size_t need = static_cast<size_t>(launch.spec.MachinesNeeded());
    if (free.size() < need) {
      job->reset();
      journals_->Remove(name).IgnoreError();
      return Status::FailedPrecondition("job " + name + " needs " + std::to_string(need) + " machines but the "
                                        "fleet's pool has " + std::to_string(free.size()) + " up");
    }
    {
      MutexLock lock(&route_mu_);
      jobs_[name] = std::move(*job);
    }
    for (const MachineId& m : free) {
      if (moved.size() == need) break;
      if (MoveLocked(m, name, p, now)) moved.push_back(m);
    }
  }
  // Off ops_mu_: the job's first decisions may already ask the pool (Grant).
  Result<std::string> id = p->Submit(std::move(launch), now);
  if (!id.ok()) {
    MutexLock ops(&ops_mu_);
    UndoSubmitLocked(name, p, moved, now);
    return id.status();
  }
  std::string list;
  for (const MachineId& m : moved) list += " " + m;
  log_.Info("job " + name + " of the fleet on" + list);
  return id;
}

void Fleet::UndoSubmitLocked(const std::string& name, Plane* p, const std::vector<MachineId>& moved, Time now) {
  for (const MachineId& m : moved) {
    std::optional<wire::RegisterRequest> reg = p->Forget(m);
    {
      MutexLock lock(&route_mu_);
      owner_.erase(m);
    }
    if (reg) main_->Register(*reg, now).IgnoreError();
  }
  granted_.erase(name);
  {
    MutexLock lock(&route_mu_);
    retired_.push_back(std::move(jobs_[name]));
    jobs_.erase(name);
  }
  if (Status s = journals_->Remove(name); !s.ok()) log_.Warn("job " + name + "'s journal: " + s.ToString());
  log_.Info("job " + name + " refused by its own plane; its " + std::to_string(moved.size()) +
            " machine(s) back in the pool");
}

void Fleet::Grant(const std::string& job, int count, Time now, bool again) {
  Result<Plane*> to = Job(job);
  MutexLock ops(&ops_mu_);
  wanting_[job] = count;  // asked again at the next Tick unless filled below
  if (!to.ok()) return;   // a job being opened: its plane is not routed to yet
  // A policy repeats its WaitForMachines with every decision while it
  // waits: machines already on their way count against it. One that has
  // joined is in the policy's next count; a retry's count is the last
  // decision's, so it drops the ones that joined since.
  std::vector<std::pair<std::string, Time>>& mine = granted_[job];
  int joined = 0;
  mine.erase(std::remove_if(mine.begin(), mine.end(),
                            [&](const auto& g) {
                              const bool in = (*to)->InJob(g.first);
                              joined += in;
                              return in || now - g.second > kGrantInFlight;
                            }),
             mine.end());
  if (again) count -= joined;
  wanting_[job] = count;
  int want = count - static_cast<int>(mine.size());
  if (want <= 0) {
    wanting_.erase(job);
    return;
  }
  for (const MachineId& m : main_->LiveMachines(now)) {
    if (want == 0) break;
    if (!MoveLocked(m, job, *to, now)) continue;
    --want;
    log_.Info("machine " + m + " from the fleet's pool to job " + job + " (it waits for machines)");
  }
  if (want == 0) {
    wanting_.erase(job);
  } else if (!again) {
    log_.Info("job " + job + " waits for " + std::to_string(want) + " machine(s); the fleet's pool is empty");
  }
}

json Fleet::StatusJson(Time now) {
  json j = main_->StatusJson(now);
  const std::vector<std::pair<std::string, Plane*>> jobs = Jobs();
  if (jobs.empty()) {
    j["jobs"] = j["job"].is_null() ? json::array() : json::array({j["job"]});
    if (!j["job"].is_null()) j["jobs"][0]["name"] = j["job"]["id"];
    return j;
  }
  // The pool's machines are the fleet's standbys.
  json machines = json::array();
  for (json& m : j["machines"]) {
    m["state"] = "standby";
    m["pool"] = true;
    machines.push_back(std::move(m));
  }
  json list = json::array();
  for (const auto& [name, p] : jobs) {
    json s = p->StatusJson(now);
    for (json& m : s["machines"]) {
      m["job"] = name;
      machines.push_back(std::move(m));
    }
    if (s["job"].is_null()) continue;  // opened, not yet submitted
    s["job"]["name"] = name;
    s["job"]["standby"] = s["standby"];
    list.push_back(std::move(s["job"]));
  }
  std::sort(machines.begin(), machines.end(), [](const json& a, const json& b) { return a["id"] < b["id"]; });
  j["machines"] = std::move(machines);
  {
    MutexLock ops(&ops_mu_);
    j["pool"] = {{"in_jobs", pool_.in_jobs},
                 {"target", pool_.target},
                 {"available", pool_.available},
                 {"on_the_way", pool_.on_the_way}};
  }
  j["job"] = list.empty() ? json(nullptr) : list[0];
  j["jobs"] = std::move(list);
  return j;
}

std::string Fleet::Metrics(Time now) {
  const std::vector<std::pair<std::string, Plane*>> jobs = Jobs();
  if (jobs.empty()) return main_->Metrics(now);  // the single job's, as it was
  std::vector<std::pair<std::string, std::string>> parts{{"", main_->Metrics(now)}};
  for (const auto& [name, p] : jobs) parts.push_back({name, p->Metrics(now)});
  return MergeMetrics(parts);
}

void Fleet::Serving(Time now) {
  main_->Serving(now);
  for (const auto& [name, p] : Jobs()) p->Serving(now);
}

void Fleet::Tick(Time now) {
  main_->Tick(now);
  for (const auto& [name, p] : Jobs()) p->Tick(now);
  std::map<std::string, int> wanting;
  {
    MutexLock ops(&ops_mu_);
    wanting = wanting_;
  }
  for (const auto& [job, count] : wanting) Grant(job, count, now, /*again=*/true);
  SizePool(now);
}

Fleet::Pool Fleet::SizePool(Time now) {
  const std::vector<std::pair<std::string, Plane*>> jobs = Jobs();
  if (jobs.empty()) {  // a single job sizes its own standbys; its 12,500 machines are not walked each tick
    MutexLock ops(&ops_mu_);
    return pool_;
  }
  Pool p;
  for (const auto& [name, plane] : jobs) p.in_jobs += plane->MachinesNeeded();
  p.available = static_cast<int>(main_->LiveMachines(now).size());
  MutexLock ops(&ops_mu_);
  const controller::StandbyReport r = controller::MakeStandbyReport(
      p.in_jobs, p.available, options_.policy.daily_failure_rate, options_.policy.standby_quantile);
  p.target = r.target;
  // Machines that joined the pool since the last look came from what was
  // asked, as far as it goes (a returned machine is counted so too).
  p.on_the_way = std::max(0, pool_.on_the_way - std::max(0, p.available - pool_.available));
  const int ask = r.deficit() - p.on_the_way;
  const bool short_again = r.deficit() > 0 && r.deficit() != pool_.target - pool_.available;
  const std::string state = "the fleet's pool has " + std::to_string(p.available) + " machine(s) of its target " +
                            std::to_string(p.target) + " for " + std::to_string(p.in_jobs) + " in jobs";
  if (options_.backend && ask > 0) {
    p.on_the_way += ask;
    const std::string id = "fleet-pool/" + std::to_string(++pool_requests_);
    options_.backend->Acquire(id, ask);
    log_.Info(state + ": asked the cluster manager for " + std::to_string(ask) + " (" + id + ")");
  } else if (!options_.backend && short_again) {
    log_.Info(state + "; no cluster manager to ask (local backend)");
  }
  pool_ = p;
  return p;
}

std::vector<Plane::ReachProbe> Fleet::ProbesDue(Time now) {
  std::vector<Plane::ReachProbe> out = main_->ProbesDue(now);
  for (const auto& [name, p] : Jobs()) {
    std::vector<Plane::ReachProbe> more = p->ProbesDue(now);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

void Fleet::ProbeDone(const Plane::ReachProbe& probe, const Status& reached, Time now) {
  For(probe.machine)->ProbeDone(probe, reached, now);
}

}  // namespace bulwark::plane
