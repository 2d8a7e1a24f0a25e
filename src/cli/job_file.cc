#include "cli/job_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include "common/files.h"
#include "common/progress_pattern.h"
#include "cli/config_file.h"
#include "controller/policy_json.h"

namespace bulwark::cli {
namespace {

Status FieldError(const std::string& source, const std::string& field, const std::string& what) {
  return Status::InvalidArgument(source + ": field '" + field + "': " + what);
}

// A list of strings, or one string split on spaces.
Result<std::vector<std::string>> Strings(const YAML::Node& n, const std::string& source, const std::string& field) {
  std::vector<std::string> out;
  if (n.IsScalar()) {
    std::string s = n.as<std::string>(), word;
    for (char c : s + " ") {
      if (c == ' ') {
        if (!word.empty()) out.push_back(word);
        word.clear();
      } else {
        word += c;
      }
    }
    return out;
  }
  if (!n.IsSequence()) return FieldError(source, field, "expected a list of strings");
  for (const YAML::Node& item : n) {
    if (!item.IsScalar()) return FieldError(source, field, "expected a list of strings, found a nested value");
    out.push_back(item.as<std::string>());
  }
  return out;
}

// A mapping's key as text. YAML allows lists and maps as keys ("{[a]: 1}");
// a job file's keys are names, and yaml-cpp throws converting anything else.
Result<std::string> Key(const YAML::Node& key, const std::string& source, const std::string& where) {
  if (!key.IsScalar()) {
    return Status::InvalidArgument(source + ": " + where + " has a key that is not a plain name (line " +
                                   std::to_string(key.Mark().line + 1) + ")");
  }
  return key.as<std::string>();
}

Result<int> PositiveInt(const YAML::Node& n, const std::string& source, const std::string& field) {
  const std::string text = n.IsScalar() ? n.as<std::string>() : "(not a number)";
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  return FieldError(source, field, "expected a positive integer, got '" + text + "'");
}

Result<int> NonNegativeInt(const YAML::Node& n, const std::string& source, const std::string& field,
                           const std::string& hint) {
  const std::string text = n.IsScalar() ? n.as<std::string>() : "(not a number)";
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  return FieldError(source, field, "expected a whole number of steps, 0 or more, got '" + text + "'; " + hint);
}

// A sub-mapping (`field: {key: value}`) whose keys are all among `known`;
// `hint` is an example of the field written right.
Status CheckMapping(const YAML::Node& n, const std::string& source, const std::string& field,
                    const std::vector<std::string>& known, const std::string& hint) {
  if (!n.IsMap()) return FieldError(source, field, "expected a mapping, " + hint);
  for (const auto& kv : n) {
    Result<std::string> k = Key(kv.first, source, "field '" + field + "'");
    if (!k.ok()) return k.status();
    if (std::find(known.begin(), known.end(), *k) == known.end()) {
      std::string names;
      for (const std::string& name : known) names += name + ", ";
      return FieldError(source, field + "." + *k, "unknown field; known: " + names + hint);
    }
  }
  return Status::OK();
}

// --- the top-level fields: one reader each, called in the table's order
// whether the field is there or not (`n` is then undefined), so that
// required fields and defaults are each said in one place ---

struct Reading {
  const std::string& source;
  const std::string& default_command;
  JobFile& job;
};

Status ReadName(const YAML::Node& n, Reading& r) {
  if (!n || !n.IsScalar() || n.as<std::string>().empty()) {
    return FieldError(r.source, "name", "required: the job's id, e.g. 'name: demo'");
  }
  r.job.name = n.as<std::string>();
  return Status::OK();
}

Status ReadWorldSize(const YAML::Node& n, Reading& r) {
  if (!n) return FieldError(r.source, "world_size", "required: the number of ranks");
  Result<int> ws = PositiveInt(n, r.source, "world_size");
  if (!ws.ok()) return ws.status();
  r.job.world_size = *ws;
  return Status::OK();
}

Status ReadRanksPerMachine(const YAML::Node& n, Reading& r) {
  if (n) {
    Result<int> rpm = PositiveInt(n, r.source, "ranks_per_machine");
    if (!rpm.ok()) return rpm.status();
    r.job.ranks_per_machine = *rpm;
  }
  if (r.job.world_size % r.job.ranks_per_machine != 0) {
    return FieldError(r.source, "ranks_per_machine", "must divide world_size (" + std::to_string(r.job.world_size) + ")");
  }
  return Status::OK();
}

Status ReadCommand(const YAML::Node& n, Reading& r) {
  if (!n) {
    r.job.argv = {r.default_command};
    return Status::OK();
  }
  Result<std::vector<std::string>> c = Strings(n, r.source, "command");
  if (!c.ok()) return c.status();
  if (c->empty()) return FieldError(r.source, "command", "is empty");
  r.job.argv = *c;
  return Status::OK();
}

Status ReadArgs(const YAML::Node& n, Reading& r) {
  if (!n) return Status::OK();
  Result<std::vector<std::string>> a = Strings(n, r.source, "args");
  if (!a.ok()) return a.status();
  r.job.argv.insert(r.job.argv.end(), a->begin(), a->end());
  return Status::OK();
}

Status ReadEnv(const YAML::Node& n, Reading& r) {
  if (!n) return Status::OK();
  if (!n.IsMap()) return FieldError(r.source, "env", "expected a mapping of NAME: value");
  for (const auto& kv : n) {
    Result<std::string> name = Key(kv.first, r.source, "field 'env'");
    if (!name.ok()) return name.status();
    if (!kv.second.IsScalar()) return FieldError(r.source, "env", "value of " + *name + " is not a string");
    r.job.env[*name] = kv.second.as<std::string>();
  }
  return Status::OK();
}

Status ReadCheckpoint(const YAML::Node& n, Reading& r) {
  if (!n) return Status::OK();
  BULWARK_RETURN_IF_ERROR(
      CheckMapping(n, r.source, "checkpoint", {"persist_every"}, "e.g. 'checkpoint: {persist_every: 50}'"));
  if (n["persist_every"]) {
    Result<int> every = NonNegativeInt(n["persist_every"], r.source, "checkpoint.persist_every",
                                       "0 never persists, 50 persists every 50th step");
    if (!every.ok()) return every.status();
    r.job.persist_every = *every;
  }
  return Status::OK();
}

Status ReadParallel(const YAML::Node& n, Reading& r) {
  if (!n) return Status::OK();
  BULWARK_RETURN_IF_ERROR(CheckMapping(n, r.source, "parallel", {"tp", "pp", "dp"},
                                       "e.g. 'parallel: {pp: 2}' (tp and pp; the rest is data parallel)"));
  JobFile& job = r.job;
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();  // a plain name: CheckMapping saw to it
    Result<int> v = PositiveInt(kv.second, r.source, "parallel." + key);
    if (!v.ok()) return v.status();
    (key == "tp" ? job.tp : key == "pp" ? job.pp : job.dp) = *v;
  }
  if (job.world_size % (job.tp * job.pp) != 0) {
    return FieldError(r.source, "parallel", "tp " + std::to_string(job.tp) + " x pp " + std::to_string(job.pp) +
                                                " must divide world_size " + std::to_string(job.world_size));
  }
  if (job.dp != 0 && job.dp * job.tp * job.pp != job.world_size) {
    return FieldError(r.source, "parallel.dp", "dp " + std::to_string(job.dp) + " x tp x pp must equal world_size " +
                                                   std::to_string(job.world_size) + "; leave dp out to derive it");
  }
  return Status::OK();
}

Status ReadProgress(const YAML::Node& n, Reading& r) {
  if (!n) return Status::OK();
  static const char* kHint = "e.g. 'progress: {regex: \"step (?P<step>\\\\d+)\"}'";
  BULWARK_RETURN_IF_ERROR(CheckMapping(n, r.source, "progress", {"regex"}, kHint));
  if (!n["regex"] || !n["regex"].IsScalar()) {
    return FieldError(r.source, "progress.regex", std::string("required: a regular expression, ") + kHint);
  }
  r.job.progress_regex = n["regex"].as<std::string>();
  Result<ProgressPattern> compiled = ProgressPattern::Compile(r.job.progress_regex);
  if (!compiled.ok()) return FieldError(r.source, "progress.regex", compiled.status().message());
  if (r.job.env.count(kProgressRegexEnv) != 0) {
    return FieldError(r.source, "progress", std::string("and env ") + kProgressRegexEnv + " both set; keep one");
  }
  r.job.env[kProgressRegexEnv] = r.job.progress_regex;
  return Status::OK();
}

Status ReadRecovery(const YAML::Node& n, Reading& r) {
  if (!n) return Status::OK();
  BULWARK_RETURN_IF_ERROR(CheckMapping(n, r.source, "recovery", {"mode", "provisioning_delay_s"},
                                       "e.g. 'recovery: {mode: requeue, provisioning_delay_s: 600}'"));
  if (n["mode"]) {
    const std::string mode = n["mode"].IsScalar() ? n["mode"].as<std::string>() : "";
    if (mode != "standby" && mode != "requeue" && mode != "elastic") {
      return FieldError(r.source, "recovery.mode", "expected standby (bulwark's warm standbys, the default), "
                                                   "elastic (the surviving replicas train on) or requeue (the "
                                                   "conventional baseline), got '" + mode + "'");
    }
    r.job.recovery = mode;
  }
  if (n["provisioning_delay_s"]) {
    Result<int> d = NonNegativeInt(n["provisioning_delay_s"], r.source, "recovery.provisioning_delay_s",
                                   "seconds a requeued job waits for machines acquired cold");
    if (!d.ok()) return d.status();
    r.job.provisioning_delay_s = *d;
  }
  return Status::OK();
}

// The job's own policy fields (controller/policy_fields.h), laid over the
// cluster's for this job alone; read and checked as `up --policy` reads its
// file (config_file.h), so a misspelt or out-of-range field fails the
// submit at once.
Status ReadPolicy(const YAML::Node& n, Reading& r) {
  if (!n) return Status::OK();
  const nlohmann::json j = FromYaml(n);
  controller::PolicyConfig p;
  if (Status s = controller::ApplyPolicyJson(j, &p); !s.ok()) {
    return Status::InvalidArgument(r.source + ": " + s.message());
  }
  for (const auto& [name, v] : j.items()) r.job.policy[name] = v.is_boolean() ? v.get<bool>() : v.get<double>();
  return Status::OK();
}

// Every top-level field, once: its name and its reader, in reading order
// (env before progress, which refuses to set what env already does).
struct Section {
  const char* name;
  Status (*read)(const YAML::Node& n, Reading& r);
};
constexpr Section kSections[] = {
    {"name", ReadName},         {"world_size", ReadWorldSize}, {"ranks_per_machine", ReadRanksPerMachine},
    {"command", ReadCommand},   {"args", ReadArgs},            {"env", ReadEnv},
    {"checkpoint", ReadCheckpoint}, {"parallel", ReadParallel}, {"progress", ReadProgress},
    {"recovery", ReadRecovery},     {"policy", ReadPolicy},
};

Status CheckTopLevel(const YAML::Node& root, const std::string& source) {
  if (!root.IsMap()) return Status::InvalidArgument(source + ": expected a mapping of fields (name, world_size, ...)");
  for (const auto& kv : root) {
    Result<std::string> k = Key(kv.first, source, "the top level");
    if (!k.ok()) return k.status();
    auto known = [&](const Section& s) { return *k == s.name; };
    if (std::none_of(std::begin(kSections), std::end(kSections), known)) {
      std::string names;
      for (const Section& s : kSections) names += std::string(names.empty() ? "" : ", ") + s.name;
      return FieldError(source, *k, "unknown field; known: " + names);
    }
  }
  return Status::OK();
}

// bulwark-train's own --pp must say what the controller is told: the
// stack analyzer, fail-slow cohorts and backup peers follow `parallel`.
Status CheckArgsAgreeOnPp(const JobFile& job, const std::string& source) {
  for (size_t i = 0; i + 1 < job.argv.size(); ++i) {
    if (job.argv[i] != "--pp") continue;
    if (job.argv[i + 1] != std::to_string(job.pp)) {
      return FieldError(source, "parallel.pp", "the args say --pp " + job.argv[i + 1] + " but the job declares pp " +
                                                   std::to_string(job.pp) + "; add 'parallel: {pp: " + job.argv[i + 1] +
                                                   "}' or make them agree");
    }
  }
  return Status::OK();
}

Result<JobFile> ParseYaml(const std::string& text, const std::string& source, const std::string& default_command) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ": not valid YAML at line " + std::to_string(e.mark.line + 1) +
                                   ": " + e.msg);
  }
  BULWARK_RETURN_IF_ERROR(CheckTopLevel(root, source));
  JobFile job;
  Reading reading{source, default_command, job};
  for (const Section& s : kSections) BULWARK_RETURN_IF_ERROR(s.read(root[s.name], reading));
  BULWARK_RETURN_IF_ERROR(CheckArgsAgreeOnPp(job, source));
  return job;
}

}  // namespace

Result<JobFile> ParseJobFile(const std::string& text, const std::string& source,
                             const std::string& default_command) {
  // Every conversion above checks the node's type first; this catches what
  // a future field forgets, so a bad file is an error and never a crash of
  // `bulwark submit` (fuzz/corpus/job_file/crash-* are the inputs that were).
  try {
    return ParseYaml(text, source, default_command);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ": unreadable value at line " + std::to_string(e.mark.line + 1) + ": " +
                                   e.msg);
  }
}

Result<JobFile> LoadJobFile(const std::string& path, const std::string& default_command) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseJobFile(*text, path, default_command);
}

}  // namespace bulwark::cli
