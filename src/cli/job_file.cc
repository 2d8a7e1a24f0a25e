#include "cli/job_file.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "common/files.h"
#include "common/progress_pattern.h"

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

Result<JobFile> ParseYaml(const std::string& text, const std::string& source, const std::string& default_command) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ": not valid YAML at line " + std::to_string(e.mark.line + 1) +
                                   ": " + e.msg);
  }
  if (!root.IsMap()) return Status::InvalidArgument(source + ": expected a mapping of fields (name, world_size, ...)");
  static const std::set<std::string> kKnown = {"name", "world_size", "ranks_per_machine", "command",
                                               "args", "env",        "checkpoint",        "parallel",
                                               "progress",   "recovery"};
  for (const auto& kv : root) {
    Result<std::string> k = Key(kv.first, source, "the top level");
    if (!k.ok()) return k.status();
    const std::string& key = *k;
    if (kKnown.count(key) == 0) {
      return FieldError(source, key,
                        "unknown field; known: name, world_size, ranks_per_machine, command, args, env, checkpoint, "
                        "parallel, progress, recovery");
    }
  }
  JobFile job;
  if (!root["name"] || !root["name"].IsScalar() || root["name"].as<std::string>().empty()) {
    return FieldError(source, "name", "required: the job's id, e.g. 'name: demo'");
  }
  job.name = root["name"].as<std::string>();
  if (!root["world_size"]) return FieldError(source, "world_size", "required: the number of ranks");
  Result<int> ws = PositiveInt(root["world_size"], source, "world_size");
  if (!ws.ok()) return ws.status();
  job.world_size = *ws;
  if (root["ranks_per_machine"]) {
    Result<int> rpm = PositiveInt(root["ranks_per_machine"], source, "ranks_per_machine");
    if (!rpm.ok()) return rpm.status();
    job.ranks_per_machine = *rpm;
  }
  if (job.world_size % job.ranks_per_machine != 0) {
    return FieldError(source, "ranks_per_machine", "must divide world_size (" + std::to_string(job.world_size) + ")");
  }
  if (root["command"]) {
    Result<std::vector<std::string>> c = Strings(root["command"], source, "command");
    if (!c.ok()) return c.status();
    if (c->empty()) return FieldError(source, "command", "is empty");
    job.argv = *c;
  } else {
    job.argv = {default_command};
  }
  if (root["args"]) {
    Result<std::vector<std::string>> a = Strings(root["args"], source, "args");
    if (!a.ok()) return a.status();
    job.argv.insert(job.argv.end(), a->begin(), a->end());
  }
  if (root["env"]) {
    if (!root["env"].IsMap()) return FieldError(source, "env", "expected a mapping of NAME: value");
    for (const auto& kv : root["env"]) {
      Result<std::string> name = Key(kv.first, source, "field 'env'");
      if (!name.ok()) return name.status();
      if (!kv.second.IsScalar()) return FieldError(source, "env", "value of " + *name + " is not a string");
      job.env[*name] = kv.second.as<std::string>();
    }
  }
  if (const YAML::Node ck = root["checkpoint"]) {
    static const char* kHint = "e.g. 'checkpoint: {persist_every: 50}'";
    if (!ck.IsMap()) return FieldError(source, "checkpoint", std::string("expected a mapping, ") + kHint);
    for (const auto& kv : ck) {
      Result<std::string> k = Key(kv.first, source, "field 'checkpoint'");
      if (!k.ok()) return k.status();
      const std::string& key = *k;
      if (key != "persist_every") {
        return FieldError(source, "checkpoint." + key, std::string("unknown field; known: persist_every, ") + kHint);
      }
    }
    if (ck["persist_every"]) {
      Result<int> every = NonNegativeInt(ck["persist_every"], source, "checkpoint.persist_every",
                                         "0 never persists, 50 persists every 50th step");
      if (!every.ok()) return every.status();
      job.persist_every = *every;
    }
  }
  if (const YAML::Node par = root["parallel"]) {
    static const char* kHint = "e.g. 'parallel: {pp: 2}' (tp and pp; the rest is data parallel)";
    if (!par.IsMap()) return FieldError(source, "parallel", std::string("expected a mapping, ") + kHint);
    for (const auto& kv : par) {
      Result<std::string> k = Key(kv.first, source, "field 'parallel'");
      if (!k.ok()) return k.status();
      const std::string& key = *k;
      if (key != "tp" && key != "pp" && key != "dp") {
        return FieldError(source, "parallel." + key, std::string("unknown field; known: tp, pp, dp, ") + kHint);
      }
      Result<int> v = PositiveInt(kv.second, source, "parallel." + key);
      if (!v.ok()) return v.status();
      (key == "tp" ? job.tp : key == "pp" ? job.pp : job.dp) = *v;
    }
    if (job.world_size % (job.tp * job.pp) != 0) {
      return FieldError(source, "parallel", "tp " + std::to_string(job.tp) + " x pp " + std::to_string(job.pp) +
                                                " must divide world_size " + std::to_string(job.world_size));
    }
    if (job.dp != 0 && job.dp * job.tp * job.pp != job.world_size) {
      return FieldError(source, "parallel.dp", "dp " + std::to_string(job.dp) + " x tp x pp must equal world_size " +
                                                   std::to_string(job.world_size) + "; leave dp out to derive it");
    }
  }
  if (const YAML::Node prog = root["progress"]) {
    static const char* kHint = "e.g. 'progress: {regex: \"step (?P<step>\\\\d+)\"}'";
    if (!prog.IsMap()) return FieldError(source, "progress", std::string("expected a mapping, ") + kHint);
    for (const auto& kv : prog) {
      Result<std::string> k = Key(kv.first, source, "field 'progress'");
      if (!k.ok()) return k.status();
      if (*k != "regex") return FieldError(source, "progress." + *k, std::string("unknown field; known: regex, ") + kHint);
    }
    if (!prog["regex"] || !prog["regex"].IsScalar()) {
      return FieldError(source, "progress.regex", std::string("required: a regular expression, ") + kHint);
    }
    job.progress_regex = prog["regex"].as<std::string>();
    Result<ProgressPattern> compiled = ProgressPattern::Compile(job.progress_regex);
    if (!compiled.ok()) return FieldError(source, "progress.regex", compiled.status().message());
    if (job.env.count(kProgressRegexEnv) != 0) {
      return FieldError(source, "progress", std::string("and env ") + kProgressRegexEnv + " both set; keep one");
    }
    job.env[kProgressRegexEnv] = job.progress_regex;
  }
  if (const YAML::Node rec = root["recovery"]) {
    static const char* kHint = "e.g. 'recovery: {mode: requeue, provisioning_delay_s: 600}'";
    if (!rec.IsMap()) return FieldError(source, "recovery", std::string("expected a mapping, ") + kHint);
    for (const auto& kv : rec) {
      Result<std::string> k = Key(kv.first, source, "field 'recovery'");
      if (!k.ok()) return k.status();
      if (*k != "mode" && *k != "provisioning_delay_s") {
        return FieldError(source, "recovery." + *k,
                          std::string("unknown field; known: mode, provisioning_delay_s, ") + kHint);
      }
    }
    if (rec["mode"]) {
      const std::string mode = rec["mode"].IsScalar() ? rec["mode"].as<std::string>() : "";
      if (mode != "standby" && mode != "requeue") {
        return FieldError(source, "recovery.mode", "expected standby (bulwark's warm standbys, the default) or "
                                                   "requeue (the conventional baseline), got '" + mode + "'");
      }
      job.requeue = mode == "requeue";
    }
    if (rec["provisioning_delay_s"]) {
      Result<int> d = NonNegativeInt(rec["provisioning_delay_s"], source, "recovery.provisioning_delay_s",
                                     "seconds a requeued job waits for machines acquired cold");
      if (!d.ok()) return d.status();
      job.provisioning_delay_s = *d;
    }
  }
  // bulwark-train's own --pp must say what the controller is told: the
  // stack analyzer, fail-slow cohorts and backup peers follow `parallel`.
  for (size_t i = 0; i + 1 < job.argv.size(); ++i) {
    if (job.argv[i] != "--pp") continue;
    if (job.argv[i + 1] != std::to_string(job.pp)) {
      return FieldError(source, "parallel.pp", "the args say --pp " + job.argv[i + 1] + " but the job declares pp " +
                                                   std::to_string(job.pp) + "; add 'parallel: {pp: " + job.argv[i + 1] +
                                                   "}' or make them agree");
    }
  }
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
