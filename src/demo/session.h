// A local cluster driven from inside the bulwark binary, for `bulwark demo`
// and `bulwark bench-recovery`: up and down through the binary's own
// subcommands (as a user would), everything else through the CLI's gRPC
// client. Every wait has a deadline; the destructor brings the cluster down,
// so a failed run never leaves processes behind.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control_client/control_client.h"
#include "cluster/layout.h"
#include "common/status.h"

namespace bulwark::demo {

using nlohmann::json;

// Milliseconds since the epoch: the controller stamps incidents with these.
int64_t WallMs();

// Runs argv to completion with stdout/stderr inherited (its stdout sent to
// stderr with `stdout_to_stderr`, to keep a JSON stdout clean); Unavailable
// when it takes more than `timeout_s` (it is killed), Internal on a non-zero exit.
Status RunChild(const std::vector<std::string>& argv, double timeout_s, bool stdout_to_stderr = false);

// Checks that `data` holds a prepared corpus (the error says how to make one)
// and clears a previous run's cluster and checkpoints under `out`.
Status PrepareRunDir(const std::string& exe_dir, const std::string& data, const std::string& out);

// The newest JSON event of `kind` ("step", "start") in a rank's log, and the
// first "step" after the newest "start" (the first step of the latest run).
std::optional<json> LastEvent(const std::string& log, const std::string& kind);
// The median of `v`; -1 when empty (benchmarks print it as such).
double Median(std::vector<double> v);

// Every JSON event line of a rank log, oldest first (stderr lines skipped).
std::vector<json> Events(const std::string& log);
std::optional<json> FirstStepAfterLastStart(const std::string& log);

class Session {
 public:
  // `bulwark up --machines N --standby S --dir DIR`, then connects.
  // `up_flags` go to `bulwark up` too (e.g. the ladder's settings).
  static Result<std::unique_ptr<Session>> Up(const std::string& exe_dir, const std::string& dir, int machines, int standby,
                                             bool quiet_stdout = false, const std::vector<std::string>& up_flags = {});
  ~Session();  // Down(), ignoring its result: the caller already failed

  Status Down();
  // In-memory checkpoint shards are persisted every `persist_every` steps
  // (0: never) under DIR/durable/NAME.
  // `recovery` is "standby" or "requeue" (controller/job.h), waiting
  // `provisioning_delay_ms` (-1: the controller's default).
  Status Submit(const std::string& name, int world_size, const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env, int persist_every = 50,
                const std::string& recovery = "standby", int64_t provisioning_delay_ms = -1);
  // `bulwark update` of the submitted job with new args and env; the
  // release's number.
  Result<int> Update(const std::string& name, int world_size, const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env, bool now, const std::string& why);
  Result<json> StatusJson();
  Result<json> Incidents();
  Result<json> Ledger();
  Result<json> Releases();
  // Injects `fault` and confirms within 3 s, from the agent's log, that the
  // agent acted on it; sends it once more if not (a one-shot command can be
  // lost when the agent's 30 s command stream rolls over). A fault of a
  // machine's part is made by the controller before it answers: one send.
  // Returns the number of sends and, in `*sent_ms`, when the delivered one
  // was sent.
  Result<int> Inject(const std::string& fault, const std::string& machine, int64_t* sent_ms,
                     const std::string& where = "", double factor = 0);
  bulwark::Status Return(const std::string& machine);
  // Returns `machine` (repaired) and waits, at most 30 s, until it is back
  // on standby: the next fault finds a standby. A machine its checkup
  // already returned to standby is left as it is.
  bulwark::Status ReturnToStandby(const std::string& machine, const std::function<void(const json&)>& tick = nullptr);

  // Polls status every 200 ms (calling `tick` with each) until `done` holds;
  // Unavailable naming `what`, the last status and controller.log after
  // `seconds`. A status without a job never satisfies `done`.
  Result<json> WaitFor(const std::string& what, double seconds, const std::function<bool(const json&)>& done,
                       const std::function<void(const json&)>& tick = nullptr);

  // The incident opened after `before` incidents existed (the job's
  // incident count went past it), within `seconds`.
  Result<json> AwaitNewIncident(int64_t before, double seconds, const std::function<void(const json&)>& tick = nullptr);
  // Incident `id` once closed (recovered or given up) and the job running
  // again, within `seconds`.
  Result<json> AwaitClosed(int64_t id, double seconds, const std::function<void(const json&)>& tick = nullptr);
  Result<json> FindIncident(int64_t id);

  const cluster::Layout& layout() const { return layout_; }
  // The machine holding placement slot `slot` in status `s`, or "".
  // One line of a status for a message: the job's state, step, width and
  // last fail-slow round, and each machine's state.
  static std::string StatusSummary(const json& s);
  static std::string SlotMachine(const json& s, size_t slot);
  static std::string MachineState(const json& s, const std::string& id);

 private:
  Session(std::string exe_dir, cluster::Layout layout, control_client::ControlClient client, bool quiet_stdout)
      : exe_dir_(std::move(exe_dir)), layout_(std::move(layout)), client_(std::move(client)), quiet_stdout_(quiet_stdout) {}
  std::string exe_dir_;
  cluster::Layout layout_;
  control_client::ControlClient client_;
  bool quiet_stdout_;
  bool down_ = false;
};

}  // namespace bulwark::demo
