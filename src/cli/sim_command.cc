#include "cli/sim_command.h"

#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/config_file.h"
#include "sim/sim.h"

namespace bulwark::cli {

using nlohmann::json;

Status SimCmd(const std::map<std::string, std::string>& flags) {
  auto has = [&](const char* k) { return flags.count(k) != 0; };
  sim::SimConfig base = has("replay") ? sim::DemoReplay() : sim::SimConfig{};
  if (has("replay") && flags.at("replay") != "demo") {
    return Status::InvalidArgument("--replay: only 'demo' is known (docs/demo.md's schedule)");
  }
  json overrides = json::object();
  if (has("config")) {
    Result<json> file = ReadConfigFile(flags.at("config"), "--config");
    if (!file.ok()) return file.status();
    overrides = *file;
  }
  // A cluster's policy file (`bulwark up --policy`): its fields over the
  // config's policy mapping, so the fleet simulated runs the cluster's policy.
  if (has("policy")) {
    Result<json> policy = ReadPolicyFile(flags.at("policy"));
    if (!policy.ok()) return policy.status();
    if (!overrides.contains("policy") || !overrides["policy"].is_object()) overrides["policy"] = json::object();
    overrides["policy"].update(*policy);
  }
  // Flags win over the files.
  for (const char* k : {"gpus", "days", "seed"}) {
    if (!has(k)) continue;
    try {
      overrides[k] = std::stod(flags.at(k));
    } catch (const std::exception&) {
      return Status::InvalidArgument(std::string("--") + k + ": expected a number, got '" + flags.at(k) + "'");
    }
  }
  // Recovery: elastic wherever the layout allows it (the default), or the
  // whole-world restart (--no-elastic, --recovery standby).
  if (has("elastic") + has("no-elastic") + has("recovery") > 1) {
    return Status::InvalidArgument("sim: give one of --elastic, --no-elastic and --recovery");
  }
  if (has("elastic")) overrides["recovery"] = "elastic";
  if (has("no-elastic")) overrides["recovery"] = "standby";
  if (has("recovery")) overrides["recovery"] = flags.at("recovery");
  // The regroup's rendezvous: the store-less path (plans in the start
  // command, the default) or every rank through the store, priced with the
  // same coefficients.
  if (has("rendezvous")) overrides["rendezvous"] = flags.at("rendezvous");
  // The elastic arm alone, without the whole-world run beside it.
  if (has("no-compare")) overrides["compare_whole_world"] = false;
  if (has("regroup")) {
    try {
      overrides["costs"]["regroup"] = std::stod(flags.at("regroup"));
    } catch (const std::exception&) {
      return Status::InvalidArgument("--regroup: expected seconds, got '" + flags.at("regroup") + "'");
    }
  }
  // Failure domains (docs/simulator.md, "Failure domains"): racks under
  // one switch each, switch faults, infant mortality; off unless asked.
  // --correlated is Llama 3's racks (2 machines a switch).
  if (has("correlated")) overrides["domains"]["rack_machines"] = 2;
  if (has("racks")) {
    try {
      overrides["domains"]["rack_machines"] = std::stoi(flags.at("racks"));
    } catch (const std::exception&) {
      return Status::InvalidArgument("--racks: expected machines a rack, got '" + flags.at("racks") + "'");
    }
  }
  if (has("placement")) overrides["domains"]["placement"] = flags.at("placement");
  // What is over-evicted on suspicion is checked and comes back (issue 38).
  if (has("checkup") && has("no-checkup")) {
    return Status::InvalidArgument("sim: give --checkup or --no-checkup, not both");
  }
  if (has("checkup")) overrides["policy"]["checkup_evicted"] = 1;
  if (has("no-checkup")) overrides["policy"]["checkup_evicted"] = 0;
  // A pipeline depth the user did not ask for follows the GPU count.
  if (!overrides.contains("pp") && overrides.contains("gpus") && overrides["gpus"].is_number()) {
    base.gpus = static_cast<int>(overrides["gpus"].get<double>());
    sim::FitPipeline(base);
  }
  Result<sim::SimConfig> config = sim::ConfigFromJson(overrides, base);
  if (!config.ok()) return config.status().Annotate("sim");

  if (has("sweep")) {
    Result<std::string> table = sim::Sweep(*config, flags.at("sweep"));
    if (!table.ok()) return table.status();
    std::cout << *table;
    return Status::OK();
  }
  Result<sim::SimResult> r = sim::Simulate(*config);
  if (!r.ok()) return r.status();
  if (has("json")) {
    std::cout << sim::ToJson(*config, *r, /*timing=*/true).dump(2) << "\n";
  } else {
    std::cout << sim::FormatText(*config, *r);
  }
  if (has("report")) {
    const std::string dir = flags.at("report");
    std::ofstream html(dir + "/sim-report.html"), js(dir + "/sim-report.json");
    if (!html || !js) return Status::IOError("--report " + dir + ": cannot write there; create the directory first");
    html << sim::RenderHtml(*config, *r);
    js << sim::ToJson(*config, *r, true).dump(2) << "\n";
    std::cerr << "report: " << dir << "/sim-report.html, sim-report.json\n";
  }
  return Status::OK();
}

}  // namespace bulwark::cli
