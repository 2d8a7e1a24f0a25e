#include "cluster/slurm/slurm_text.h"

#include <nlohmann/json.hpp>

namespace bulwark::cluster {
namespace {

using nlohmann::json;

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The value of " KEY=" up to the next space ("" when absent).
std::string Field(const std::string& line, const std::string& key) {
  size_t at = line.rfind(key + "=", 0) == 0 ? 0 : std::string::npos;
  if (at == std::string::npos) {
    at = line.find(" " + key + "=");
    if (at == std::string::npos) return "";
    ++at;
  }
  const size_t start = at + key.size() + 1;
  const size_t end = line.find(' ', start);
  return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// A path goes into a shell word between single quotes (sbatch --wrap).
bool ShellSafe(const std::string& s) { return s.find('\'') == std::string::npos && s.find('\n') == std::string::npos; }

}  // namespace

std::string EncodeSlurmRecord(const SlurmRecord& r) {
  return json{{"kind", "slurm"},         {"job", r.job},   {"batch_host", r.batch_host},
              {"allocation", r.allocation}, {"agents", r.agents}, {"grow", r.grow},
              {"bulwark", r.bulwark},    {"dir", r.dir},       {"domains", r.domains}}
             .dump(2) +
         "\n";
}

Result<SlurmRecord> DecodeSlurmRecord(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != "slurm") {
    return Status::Corrupt("backend record is not a Slurm record; run 'bulwark up --backend slurm' again");
  }
  SlurmRecord r;
  try {
    r.job = j.at("job").get<std::string>();
    r.batch_host = j.at("batch_host").get<std::string>();
    r.allocation = j.at("allocation").get<std::vector<std::string>>();
    r.agents = j.at("agents").get<std::vector<std::string>>();
    r.grow = j.at("grow").get<int>();
    r.bulwark = j.at("bulwark").get<std::string>();
    r.dir = j.at("dir").get<std::string>();
    // Records written before domains existed have none.
    if (j.contains("domains")) r.domains = j.at("domains").get<std::map<std::string, std::string>>();
  } catch (const std::exception& e) {
    return Status::Corrupt(std::string("backend record: ") + e.what() + "; run 'bulwark up --backend slurm' again");
  }
  if (r.job.empty() || r.bulwark.empty() || r.dir.empty() || r.grow < 0 || !ShellSafe(r.bulwark) || !ShellSafe(r.dir)) {
    return Status::Corrupt("backend record: job, binary and directory must be set, paths without quotes, grow >= 0");
  }
  return r;
}

Result<SlurmNode> ParseNodeLine(const std::string& text) {
  const std::string line = Trim(text);
  SlurmNode n;
  n.name = Field(line, "NodeName");
  n.state = Field(line, "State");
  if (n.name.empty() || n.state.empty()) {
    return Status::Corrupt("scontrol show node printed no NodeName= and State=: '" + line.substr(0, 200) + "'");
  }
  for (size_t b = 0; b <= n.state.size();) {
    size_t e = n.state.find('+', b);
    if (e == std::string::npos) e = n.state.size();
    if (n.state.compare(b, e - b, "DRAIN") == 0) n.drain = true;
    b = e + 1;
  }
  // Reason is the last field and the only one with spaces in its value;
  // Slurm appends " [user@time]".
  const size_t at = line.find(" Reason=");
  if (at != std::string::npos) {
    std::string reason = line.substr(at + 8);
    const size_t stamp = reason.rfind(" [");
    if (stamp != std::string::npos && reason.back() == ']') reason = reason.substr(0, stamp);
    n.reason = reason == "(null)" ? "" : reason;
  }
  return n;
}

std::vector<std::string> ParseLines(const std::string& text) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    std::string l = Trim(text.substr(b, e - b));
    if (!l.empty()) out.push_back(std::move(l));
    b = e + 1;
  }
  return out;
}

Result<std::string> ParseSubmittedJob(const std::string& text) {
  std::string t = Trim(text);
  t = t.substr(0, t.find(';'));
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos) {
    return Status::Corrupt("sbatch --parsable printed '" + Trim(text).substr(0, 200) + "', not a job id");
  }
  return t;
}

std::vector<SlurmStep> ParseSteps(const std::string& text) {
  std::vector<SlurmStep> out;
  for (const std::string& l : ParseLines(text)) {
    const size_t bar = l.find('|');
    if (bar == std::string::npos) continue;
    out.push_back({Trim(l.substr(0, bar)), Trim(l.substr(bar + 1))});
  }
  return out;
}

std::string DrainReason(const std::string& reason) {
  std::string r = reason.rfind(kReasonPrefix, 0) == 0 ? reason : std::string(kReasonPrefix) + " " + reason;
  for (char& c : r) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (r.size() > 200) r = r.substr(0, 197) + "...";
  return r;
}

bool DrainedByBulwark(const SlurmNode& node) {
  return node.drain && node.reason.rfind(kReasonPrefix, 0) == 0;
}

std::vector<std::string> AgentStepArgv(const SlurmRecord& r, const std::string& node) {
  std::vector<std::string> argv = {"srun",   "--jobid=" + r.job, "--overlap", "--nodes=1", "--ntasks=1",
                                   "--nodelist=" + node, "--job-name=" + std::string(kAgentStepName),
                                   "--kill-on-bad-exit=0", r.bulwark, "agent", "--dir", r.dir, "--machine", node};
  if (auto d = r.domains.find(node); d != r.domains.end()) argv.insert(argv.end(), {"--domain", d->second});
  return argv;
}

std::vector<std::string> AgentJobArgv(const SlurmRecord& r, const std::string& log, const std::string& node) {
  std::vector<std::string> argv = {"sbatch", "--parsable", "--nodes=1", "--ntasks=1", "--exclusive",
                                   "--job-name=" + std::string(kAgentStepName), "--output=" + log};
  if (!node.empty()) argv.push_back("--nodelist=" + node);
  // The record's paths carry no single quote (DecodeSlurmRecord checks).
  // A node Slurm picks is not known here: its agent registers no domain.
  auto d = node.empty() ? r.domains.end() : r.domains.find(node);
  const bool named = d != r.domains.end() && ShellSafe(d->second) && d->second.find('"') == std::string::npos;
  argv.push_back("--wrap=exec '" + r.bulwark + "' agent --dir '" + r.dir + "' --machine \"$SLURMD_NODENAME\"" +
                 (named ? " --domain '" + d->second + "'" : ""));
  return argv;
}

std::vector<std::string> DrainArgv(const std::string& node, const std::string& reason) {
  return {"scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=" + DrainReason(reason)};
}

std::vector<std::string> ResumeArgv(const std::string& node) {
  return {"scontrol", "update", "NodeName=" + node, "State=RESUME"};
}

std::vector<std::string> ShrinkArgv(const std::string& job, const std::vector<std::string>& keep) {
  std::string list;
  for (const std::string& n : keep) list += (list.empty() ? "" : ",") + n;
  return {"scontrol", "update", "JobId=" + job, "NodeList=" + list};
}

}  // namespace bulwark::cluster
