#include "demo/session.h"

#include <algorithm>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "cluster/local/emulator.h"
#include "common/files.h"

#include "bulwark.grpc.pb.h"

namespace bulwark::demo {

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Status RunChild(const std::vector<std::string>& argv, double timeout_s, bool stdout_to_stderr) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::Internal("fork failed for " + argv[0]);
  if (pid == 0) {
    if (stdout_to_stderr) ::dup2(2, 1);
    ::execv(args[0], args.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return Status::Unavailable(argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + " did not finish within " +
                                 std::to_string(static_cast<int>(timeout_s)) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return Status::Internal(argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + " failed (status " + std::to_string(st) + ")");
  }
  return Status::OK();
}

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<json> Events(const std::string& log) {
  std::ifstream in(log);
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("event")) out.push_back(std::move(j));
  }
  return out;
}

namespace {

std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

}  // namespace

std::optional<json> LastEvent(const std::string& log, const std::string& kind) {
  // Only the tail: the demo asks every second and logs grow by a line a step.
  std::istringstream in(Tail(log, 16384));
  std::optional<json> last;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == kind) last = std::move(j);
  }
  return last;
}

std::optional<json> FirstStepAfterLastStart(const std::string& log) {
  std::optional<json> step;
  for (const json& e : Events(log)) {
    if (e["event"] == "start") step.reset();
    if (e["event"] == "step" && !step) step = e;
  }
  return step;
}

Result<std::unique_ptr<Session>> Session::Up(const std::string& exe_dir, const std::string& dir, int machines, int standby,
                                             bool quiet_stdout, const std::vector<std::string>& up_flags) {
  std::vector<std::string> argv = {exe_dir + "/bulwark", "up", "--machines", std::to_string(machines), "--standby",
                                   std::to_string(standby), "--dir", dir};
  argv.insert(argv.end(), up_flags.begin(), up_flags.end());
  const Status up = RunChild(argv, 60, quiet_stdout);
  Result<control_client::ControlClient> client = up.ok() ? control_client::ControlClient::Connect(dir) : Result<control_client::ControlClient>(up);
  if (!client.ok()) {
    // A half-started cluster (controller up, an agent missing) goes down too.
    // The start's error is the one to report; what a failed down leaves
    // running, the next `bulwark down --dir` stops.
    RunChild({exe_dir + "/bulwark", "down", "--dir", dir}, 30, quiet_stdout).IgnoreError();
    return client.status();
  }
  return std::unique_ptr<Session>(new Session(exe_dir, cluster::Layout{dir}, std::move(*client), quiet_stdout));
}

// A destructor cannot report: the demo calls Down() itself where its result
// matters; this one only makes sure an early return leaves no cluster up.
Session::~Session() { Down().IgnoreError(); }

Status Session::Down() {
  if (down_) return Status::OK();
  down_ = true;
  return RunChild({exe_dir_ + "/bulwark", "down", "--dir", layout_.dir}, 30, quiet_stdout_);
}

Status Session::Submit(const std::string& name, int world_size, const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env, int persist_every, const std::string& recovery,
                       int64_t provisioning_delay_ms) {
  wire::SubmitRequest req;
  req.set_recovery(recovery);
  req.set_provisioning_delay_ms(provisioning_delay_ms);
  req.set_name(name);
  req.set_persist_every(persist_every);
  req.set_durable_dir(layout_.dir + "/durable/" + name);
  req.set_world_size(world_size);
  req.set_ranks_per_machine(1);
  req.add_argv(exe_dir_ + "/bulwark-train");
  for (const std::string& a : args) req.add_argv(a);
  for (const auto& [k, v] : env) (*req.mutable_env())[k] = v;
  Result<std::string> id = client_.Submit(req);
  return id.ok() ? Status::OK() : id.status();
}

Result<int> Session::Update(const std::string& name, int world_size, const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& env, bool now, const std::string& why) {
  wire::UpdateRequest req;
  req.set_name(name);
  req.set_world_size(world_size);
  req.set_ranks_per_machine(1);
  req.add_argv(exe_dir_ + "/bulwark-train");
  for (const std::string& a : args) req.add_argv(a);
  for (const auto& [k, v] : env) (*req.mutable_env())[k] = v;
  req.set_now(now);
  req.set_why(why);
  req.set_who("bench");
  return client_.Update(req);
}

Result<json> Session::StatusJson() { return client_.Status(); }
Result<json> Session::Incidents() { return client_.Incidents(); }
Result<json> Session::Ledger() { return client_.Ledger(); }
Result<json> Session::Releases() { return client_.Releases(); }
namespace {
int CountLines(const std::string& path, const std::string& needle) {
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos;
  return n;
}
}  // namespace

Result<int> Session::Inject(const std::string& fault, const std::string& machine, int64_t* sent_ms,
                            const std::string& where, double factor) {
  if (fault == "nic-flap" && std::ifstream(layout_.netns()).good()) {
    // Machines in namespaces: the link goes down for real, made by `bulwark
    // inject` with ip as the network would, and nothing in the agent knows.
    // Half a second, as a NIC renegotiating does: TCP's first retransmission
    // (200 ms, then 400 ms later) carries the ranks' traffic over it.
    *sent_ms = WallMs();
    BULWARK_RETURN_IF_ERROR(RunChild({exe_dir_ + "/bulwark", "inject", "nic-flap", "--machine", machine, "--for",
                                      "0.5", "--dir", layout_.dir}, 30, true));
    return 1;
  }
  if (cluster::Emulator::Makes(fault)) {
    // A part's fault: the controller made it in the machine's emulated
    // hardware before answering (cluster/local/emulator.h); no agent is told.
    *sent_ms = WallMs();
    BULWARK_RETURN_IF_ERROR(client_.Inject(machine, fault, -1, where, factor));
    return 1;
  }
  const std::string log = layout_.agent_log(machine), needle = "injecting " + fault;
  const int before = CountLines(log, needle);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    *sent_ms = WallMs();
    BULWARK_RETURN_IF_ERROR(client_.Inject(machine, fault, -1, where, factor));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < deadline) {
      if (CountLines(log, needle) > before) return attempt;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return bulwark::Status::Unavailable("the agent on " + machine + " did not act on '" + fault + "' after 2 sends; see " + log);
}
bulwark::Status Session::Return(const std::string& machine) { return client_.ReturnMachine(machine).status(); }

bulwark::Status Session::ReturnToStandby(const std::string& machine, const std::function<void(const json&)>& tick) {
  // A machine evicted on suspicion gets a checkup off the job's path
  // (checkup_evicted, on by default) and may be a standby again already:
  // then there is nothing to return, and the controller refuses it.
  auto standby = [&] {
    Result<json> s = client_.Status();
    return s.ok() && MachineState(*s, machine) == "standby";
  };
  if (standby()) return Status::OK();
  if (Status st = Return(machine); !st.ok()) return standby() ? Status::OK() : st;
  Result<json> back = WaitFor(machine + " back on standby", 30,
                              [&](const json& x) { return MachineState(x, machine) == "standby"; }, tick);
  return back.ok() ? Status::OK() : back.status();
}

Result<json> Session::WaitFor(const std::string& what, double seconds, const std::function<bool(const json&)>& done,
                              const std::function<void(const json&)>& tick) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  json last;
  while (std::chrono::steady_clock::now() < deadline) {
    Result<json> s = client_.Status();
    if (s.ok()) {
      last = *s;
      if (tick) tick(last);
      if (!last["job"].is_null() && done(last)) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return bulwark::Status::Unavailable(what + " did not happen within " + std::to_string(static_cast<int>(seconds)) +
                                      " s; last status: " + StatusSummary(last) + "; see " + layout_.controller_log());
}

std::string Session::StatusSummary(const json& s) {
  if (!s.is_object() || s["job"].is_null()) return "no job";
  const json& j = s["job"];
  std::string out = "job " + j.value("state", std::string("?")) + " at step " +
                    std::to_string(j.value("last_step", int64_t{0})) + ", generation " +
                    std::to_string(j.value("generation", int64_t{0})) + ", " +
                    std::to_string(j.value("incidents", int64_t{0})) + " incidents, width " +
                    std::to_string(j.value("training_world_size", int64_t{0})) + "/" +
                    std::to_string(j.value("world_size", int64_t{0}));
  if (j.contains("detectors") && j["detectors"]["slow_round"].is_string()) {
    out += ", slow round: " + j["detectors"]["slow_round"].get<std::string>();
  }
  std::string machines;
  if (s["machines"].is_array()) {
    for (const json& m : s["machines"]) {
      machines += (machines.empty() ? "" : " ") + m.value("id", std::string("?")) + ":" + m.value("state", std::string("?"));
    }
  }
  return out + (machines.empty() ? "" : "; machines " + machines);
}

Result<json> Session::FindIncident(int64_t id) {
  Result<json> all = client_.Incidents();
  if (!all.ok()) return all.status();
  for (const json& i : *all) if (i.value("id", int64_t{0}) == id) return i;
  return bulwark::Status::NotFound("incident " + std::to_string(id) + " is not in the controller's log");
}

Result<json> Session::AwaitNewIncident(int64_t before, double seconds, const std::function<void(const json&)>& tick) {
  Result<json> s = WaitFor("detection (a new incident)", seconds,
                           [&](const json& s) { return s["job"].value("incidents", int64_t{0}) > before; }, tick);
  if (!s.ok()) return s.status();
  return FindIncident(before + 1);  // ids count up from 1
}

Result<json> Session::AwaitClosed(int64_t id, double seconds, const std::function<void(const json&)>& tick) {
  json closed;
  Result<json> s = WaitFor("recovery from incident " + std::to_string(id), seconds, [&](const json& s) {
    if (s["job"]["state"] != "running" && s["job"]["state"] != "completed") return false;
    Result<json> i = FindIncident(id);
    if (!i.ok() || !i->value("closed", false)) return false;
    closed = *i;
    return true;
  }, tick);
  if (!s.ok()) return s.status();
  return closed;
}

std::string Session::SlotMachine(const json& s, size_t slot) {
  if (s["job"].is_null() || !s["job"]["placement"].is_array() || slot >= s["job"]["placement"].size()) return "";
  const json& m = s["job"]["placement"][slot];
  return m.is_string() ? m.get<std::string>() : "";
}

std::string Session::MachineState(const json& s, const std::string& id) {
  for (const json& m : s["machines"]) if (m["id"] == id) return m["state"];
  return "";
}

Status PrepareRunDir(const std::string& exe_dir, const std::string& data, const std::string& out) {
  if (!PathExists(data + "/tokenizer.model")) {
    return Status::NotFound("no prepared corpus in " + data + "; run '" + exe_dir + "/bulwark-train prepare --corpus kjv --out " +
                            data + "' (or make demo)");
  }
  BULWARK_RETURN_IF_ERROR(RemoveTree(out + "/cluster"));
  BULWARK_RETURN_IF_ERROR(RemoveTree(out + "/ckpt"));
  return MakeDirs(out);
}

}  // namespace bulwark::demo
