#include "cli/release_commands.h"

#include <pwd.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>

#include "control_client/control_client.h"
#include "cli/job_file.h"
#include "common/checksum.h"

namespace bulwark::cli {

using control_client::ControlClient;
namespace {

using nlohmann::json;

// user@host, for the release's record.
std::string Who() {
  std::string user = "unknown";
  if (const passwd* pw = getpwuid(getuid())) user = pw->pw_name;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return user + "@" + host;
}

// The checksum of the program a release runs, so that `releases` tells two
// builds of the same path apart; "" when argv[0] is not a readable file
// (a name found on PATH by the agent, say).
std::string BinaryHash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(Checksum64(bytes.data(), bytes.size())));
  return buf;
}

std::string When(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::gmtime(&t));
  return buf;
}

}  // namespace

Status UpdateCmd(const std::string& dir, const std::string& of, const std::string& job_path,
                 const std::string& default_command, bool now, const std::string& why) {
  Result<JobFile> job = LoadJobFile(job_path, default_command);
  if (!job.ok()) return job.status().Annotate("update (the running job is untouched)");
  if (!of.empty()) job->name = of;
  Result<ControlClient> client = ControlClient::Connect(dir);
  if (!client.ok()) return client.status();
  wire::UpdateRequest req;
  req.set_job(of);
  req.set_name(job->name);
  req.set_world_size(job->world_size);
  req.set_ranks_per_machine(job->ranks_per_machine);
  for (const std::string& s : job->argv) req.add_argv(s);
  for (const auto& [k, v] : job->env) (*req.mutable_env())[k] = v;
  req.set_tp(job->tp);
  req.set_pp(job->pp);
  req.set_now(now);
  req.set_why(why);
  req.set_who(Who());
  req.set_binary_hash(BinaryHash(job->argv.front()));
  Result<int> n = client->Update(req);
  if (!n.ok()) return n.status().Annotate("update (the running job is untouched)");
  std::cout << "release " << *n << " of job " << job->name << ": "
            << (now ? "restarting in place now" : "applied at the next restart (forced after its age)") << "\n";
  return Status::OK();
}

Status RollbackCmd(const std::string& dir, const std::string& job, int to, const std::string& why) {
  Result<ControlClient> client = ControlClient::Connect(dir);
  if (!client.ok()) return client.status();
  client->set_job(job);
  BULWARK_RETURN_IF_ERROR(client->Rollback(to, why).Annotate("rollback (the running job is untouched)"));
  std::cout << "rolling back" << (to > 0 ? " to release " + std::to_string(to) : "")
            << ": restarting in place from in-memory checkpoints\n";
  return Status::OK();
}

Status ReleasesCmd(const std::string& dir, const std::string& job, bool as_json) {
  Result<ControlClient> client = ControlClient::Connect(dir);
  if (!client.ok()) return client.status();
  client->set_job(job);
  Result<json> r = client->Releases();
  if (!r.ok()) return r.status();
  if (as_json) {
    std::cout << r->dump(2) << "\n";
    return Status::OK();
  }
  if ((*r)["releases"].empty()) {
    std::cout << "no job submitted\n";
    return Status::OK();
  }
  for (const json& x : (*r)["releases"]) {
    std::string cmd;
    for (const auto& a : x["argv"]) cmd += (cmd.empty() ? "" : " ") + a.get<std::string>();
    const std::string state = x.value("state", "");
    std::cout << "release " << x["number"].get<int>() << (state.empty() ? "" : " [" + state + "]") << "  ";
    if (x["number"].get<int>() > 1) {
      std::cout << When(x["created_ms"].get<int64_t>()) << " UTC by " << x["who"].get<std::string>()
                << (x["now"].get<bool>() ? ", now" : ", lazy");
    } else {
      std::cout << "as submitted";
    }
    const std::string why = x.value("why", "");
    if (!why.empty() && x["number"].get<int>() > 1) std::cout << ": " << why;
    std::cout << "\n    " << cmd;
    const std::string hash = x.value("binary_hash", "");
    if (!hash.empty()) std::cout << "  (binary " << hash << ")";
    std::cout << "\n";
  }
  return Status::OK();
}

}  // namespace bulwark::cli
