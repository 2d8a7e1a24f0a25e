// The agent's observation: what it sees of its ranks and its machine, sent
// up as events (agent_impl.h): exits and their log signatures, steps from
// the logs and the rank links, the ranks' signals, peer-lost exits held for
// the culprit's report, the end of a generation, and the machine's and the
// ranks' inspections. It decides nothing and starts or stops nothing:
// carrying out the controller's commands is agent_commands.cc's, the main
// loop and the controller link agent.cc's.
#include "agent/agent_impl.h"

namespace bulwark::agent {
namespace detail {

void Agent::WatchExits() {
  std::set<pid_t> pids;
  for (const auto& [rank, pid] : supervisor_.Pids()) pids.insert(pid);
  exit_watcher_.Watch(pids);
}

void Agent::WatchRanks() {
  for (auto& [rank, f] : gen_.followers) {
    f.Poll();
    SignalProgress(rank, f.TakeProgress());
  }
  auto r0 = gen_.followers.find(0);
  if (r0 != gen_.followers.end() && r0->second.last_step()) ReportStep(*r0->second.last_step());
  for (auto& [rank, f] : gen_.followers) {
    if (auto r = f.TakeRestore()) {
      wire::AgentEvent e;
      e.set_kind(wire::AgentEvent::RESTORED);
      e.set_rank(rank);
      e.set_step(r->step);
      e.set_source(r->source);
      e.set_newest_step(r->newest_step);
      e.set_restore_ms(r->ms);
      Log("ranks restored step " + std::to_string(r->step) + " from " + r->source + " (newest surviving step " +
          std::to_string(r->newest_step) + ", " + std::to_string(static_cast<int>(r->ms)) + " ms)");
      Emit(e);
    }
  }
  for (const RankExit& x : supervisor_.Reap()) {
    auto it = gen_.followers.find(x.rank);
    std::vector<std::string> tail;
    if (it != gen_.followers.end()) {
      it->second.Poll();
      tail = it->second.tail();
    }
    if (x.signal == 0 && x.exit_code == 0) {
      int64_t step = 0;
      if (it != gen_.followers.end() && it->second.last_step()) step = *it->second.last_step();
      if (auto l = gen_.link_steps.find(x.rank); l != gen_.link_steps.end()) step = std::max(step, l->second);
      gen_.finished[x.rank] = step;
      Log("rank " + std::to_string(x.rank) + " exited 0 after step " + std::to_string(step) + ": it has finished");
      // bulwark-train's done line says so at once, before the other ranks' exits are in.
      if (x.rank == 0 && it != gen_.followers.end() && it->second.done_step()) {
        wire::AgentEvent e;
        e.set_kind(wire::AgentEvent::JOB_DONE);
        e.set_step(*it->second.done_step());
        Emit(e);
      }
      continue;
    }
    wire::AgentEvent e;
    e.set_kind(wire::AgentEvent::RANK_EXITED);
    e.set_rank(x.rank);
    e.set_exit_code(x.exit_code);
    e.set_signal(x.signal);
    e.set_signature(sigs_.Match(tail));
    e.set_unreachable_peer(UnreachablePeer(tail));
    if (std::string closed = ClosedPeer(tail); !closed.empty()) gen_.peers_closed.insert(std::move(closed));
    // The shell's and exec's "command not found": the job's fault, not the machine's.
    if (x.signal == 0 && x.exit_code == 127 && e.signature().empty()) e.set_signature("command_not_found");
    e.set_observed_ms(Ms(x.at));
    e.set_generation(supervisor_.generation());  // reaped before any newer start
    ++rank_exits_[{x.rank, x.signal != 0 ? "signal" : x.exit_code == kExitPeerLost ? "peer_lost" : "error"}];
    if (x.signal == 0 && x.exit_code == kExitPeerLost) {
      Log("rank " + std::to_string(x.rank) + " lost a peer (" + e.signature() +
          (e.unreachable_peer().empty() ? "" : ", could not connect to " + e.unreachable_peer()) +
          "); holding the report for the culprit's");
      echoes_.Hold(e, x.at);
      continue;
    }
    LogWarn("rank " + std::to_string(x.rank) + " exited (code " + std::to_string(x.exit_code) + ", signal " +
        std::to_string(x.signal) + ", signature '" + e.signature() + "')");
    Emit(e);
  }
}

void Agent::ReportStep(int64_t step, int64_t observed_ms) {
  if (step <= gen_.reported_step) return;
  gen_.reported_step = step;
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::STEP);
  e.set_step(step);
  e.set_observed_ms(observed_ms);  // 0: now (Emit)
  // One step event per loop: the latest is all the policy needs.
  if (!pending_.empty() && pending_.back().kind() == wire::AgentEvent::STEP) pending_.pop_back();
  Emit(e);
}

void Agent::EndGeneration() {
  ForwardRankLinks(/*progress=*/false);
  gen_ = GenerationView{};
}

void Agent::SignalProgress(int rank, const std::vector<LogFollower::Progress>& lines) {
  for (const LogFollower::Progress& p : lines) {
    rank_client::StepSignal s;
    s.step = p.match.step;
    s.loss = p.match.loss.value_or(0);
    s.step_ms = std::chrono::duration<double, std::milli>(p.seen - last_progress_[rank]).count();
    s.observed_ms = Ms(p.seen);
    last_progress_[rank] = p.seen;
    signals_.Add(rank, supervisor_.generation(), s.Format());
  }
}

void Agent::ReadRankLinks() { ForwardRankLinks(/*progress=*/true); }

void Agent::ForwardRankLinks(bool progress) {
  for (RankLinkServer::Message& m : links_->Take()) {
    const std::string word = m.text.substr(0, m.text.find(' '));
    if (word == "INPLACE") {
      gen_.in_place = true;
      continue;
    }
    if (word == "SPLICE") {
      gen_.spliceable.insert(m.rank);
      continue;
    }
    if (word == "LOST" || word == "WAIT" || word == "READY") {
      // It waits for an ASSIGN (handoff.h). A lost peer is reported the way
      // a peer-lost exit was: held for the culprit's report and the restart.
      supervisor_.MarkWaiting(m.pid);
      if (word == "LOST" && supervisor_.RankOf(m.pid) >= 0 && !yielding_) HoldPeerLost(m.rank);
      continue;
    }
    if (m.text.compare(0, 5, "STEP ") == 0) gen_.saw_step = true;
    if (progress && m.text.compare(0, 5, "STEP ") == 0) {
      Result<rank_client::StepSignal> step = rank_client::StepSignal::Parse(m.text);
      // A held-back step did not complete. The rank's own time of the step:
      // the agent reads its links only every loop.
      if (step.ok() && step->halted.empty()) {
        int64_t& newest = gen_.link_steps[m.rank];
        newest = std::max(newest, step->step);
        if (m.rank == 0) ReportStep(step->step, step->observed_ms);
      }
    }
    signals_.Add(m.rank, supervisor_.generation(), m.text);
  }
}

void Agent::HoldPeerLost(int rank) {
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::RANK_EXITED);
  e.set_rank(rank);
  e.set_exit_code(kExitPeerLost);
  auto it = gen_.followers.find(rank);
  if (it != gen_.followers.end()) {
    it->second.Poll();
    e.set_signature(sigs_.Match(it->second.tail()));
    if (std::string closed = ClosedPeer(it->second.tail()); !closed.empty()) gen_.peers_closed.insert(std::move(closed));
  }
  const auto now = Now();
  e.set_observed_ms(Ms(now));
  Log("rank " + std::to_string(rank) + " lost a peer (" + e.signature() + ") and waits in place; holding the report");
  echoes_.Hold(e, now);
}

void Agent::ReleaseEchoes() {
  const auto now = Now();
  const bool reachable = ControllerReachable(now, last_report_ok_);
  for (wire::AgentEvent& e : echoes_.Due(now, reachable)) {
    // A rank that waits in place for the restart that did not come ends
    // now, as the exit this report says it is.
    if (supervisor_.Discard(e.rank()).ok()) Log("ended rank " + std::to_string(e.rank()) + ", which waited in place");
    Log("reporting rank " + std::to_string(e.rank()) + "'s peer-lost exit: no restart came");
    Emit(std::move(e));
  }
}

void Agent::InspectMachine() {
  const HealthReading h = Inspect(health_paths_, gpu_.get());
  health_ = h;
  auto fail = [&](const char* kind, const std::string& detail) {
    wire::AgentEvent e;
    e.set_kind(wire::AgentEvent::INSPECTION_FAILED);
    e.set_inspection(kind);
    e.set_detail(detail);
    LogWarn(std::string("inspection failed: ") + kind + ": " + detail);
    ++inspection_failures_[kind];
    Emit(e);
  };
  // Each failure is reported when it appears, not every second after.
  if (!h.device_ok && !device_reported_) fail("device", h.device_detail);
  device_reported_ = !h.device_ok;
  if (!h.disk_ok && !disk_reported_) fail("disk", h.disk_detail);
  disk_reported_ = !h.disk_ok;
  if (!h.memory_ok && !memory_reported_) fail("memory", h.memory_detail);
  memory_reported_ = !h.memory_ok;
  auto alert = [&](const std::string& detail) {
    wire::AgentEvent e;
    e.set_kind(wire::AgentEvent::NETWORK_ALERT);
    e.set_detail(detail);
    LogWarn("network alert: " + detail);
    ++inspection_failures_["nic"];
    Emit(e);
  };
  const std::string kernel = h.nic_detail.empty() ? "" : ": " + h.nic_detail;
  // Carrier changes the two readings do not explain (one if the state
  // changed, none if not): a flap, down and up again, that no reading saw.
  const uint64_t changes = h.link && last_link_ ? FlapsBetween(*last_link_, *h.link) : 0;
  const uint64_t unseen = changes - std::min<uint64_t>(changes, h.nic_up != nic_was_up_ ? 1 : 0);
  if (!h.nic_up && nic_was_up_) {
    alert("link down on " + o_.machine + kernel);
  } else if (unseen >= 2) {
    alert("link flapped on " + o_.machine + " (" + std::to_string(changes) + " carrier changes within " +
          std::to_string(kInspectPeriod.count()) + " ms)" + kernel);
  }
  nic_was_up_ = h.nic_up;
  last_link_ = h.link;
  // A fail-slow hint, once per episode: the compute-time comparison decides.
  if (h.device_slowdown != device_slowdown_ && !h.device_slowdown.empty()) Log("device slowdown: " + h.device_slowdown);
  device_slowdown_ = h.device_slowdown;
  InspectRankProcesses();
}

void Agent::InspectRankProcesses() {
  const std::map<int, pid_t> none;
  // Before a rank of this generation has stepped, a long uninterruptible
  // sleep is mostly start-up paging libtorch and the data in from a cold
  // disk (seen: four ranks 10 s in D at a demo's first start, which stopped
  // the job as a software error); the first-step hang allowance covers a
  // start that never progresses.
  const bool started = gen_.saw_step || gen_.reported_step > 0;
  for (const auto& [rank, detail] :
       stuck_.Check(!started ? none : supervisor_.Pids(), std::chrono::steady_clock::now())) {
    wire::AgentEvent e;
    e.set_kind(wire::AgentEvent::INSPECTION_FAILED);
    e.set_inspection("process");
    e.set_rank(rank);
    e.set_detail(detail);
    LogWarn("inspection failed: process: " + detail);
    ++inspection_failures_["process"];
    Emit(e);
  }
}

}  // namespace detail
}  // namespace bulwark::agent
