#include "sim/config.h"

#include <chrono>
#include <cmath>
#include <map>
#include <utility>

#include "controller/policy_json.h"

namespace bulwark::sim {
namespace {

using nlohmann::json;

const char* const kClassNames[kNumFaultClasses] = {"gpu", "hbm",  "software",  "network", "host",
                                                  "hang", "sdc", "fail_slow", "nic_flap"};

Result<FaultClass> ParseClass(const std::string& field, const std::string& name) {
  for (int i = 0; i < kNumFaultClasses; ++i) {
    if (name == kClassNames[i]) return static_cast<FaultClass>(i);
  }
  std::string known;
  for (const char* n : kClassNames) known += (known.empty() ? "" : ", ") + std::string(n);
  return Status::InvalidArgument(field + ": unknown fault class '" + name + "'; use one of " + known);
}

Status Bad(const std::string& field, const std::string& what) {
  return Status::InvalidArgument(field + ": " + what);
}

// A number at `field`, or a one-line error naming it.
Result<double> Number(const json& v, const std::string& field) {
  if (!v.is_number()) return Bad(field, "expected a number, got " + v.dump());
  return v.get<double>();
}

// The named cost fields, so that JSON and the run record share one list.
std::vector<std::pair<const char*, double*>> CostFields(Costs& c) {
  return {{"detect_gpu", &c.detect_gpu},
          {"detect_hbm", &c.detect_hbm},
          {"detect_software", &c.detect_software},
          {"detect_sdc", &c.detect_sdc},
          {"nic_alert_interval", &c.nic_alert_interval},
          {"heartbeat_timeout", &c.heartbeat_timeout},
          {"report_period", &c.report_period},
          {"tick_period", &c.tick_period},
          {"closed_peer_timeout", &c.closed_peer_timeout},
          {"reconnect_grace", &c.reconnect_grace},
          {"stack_capture", &c.stack_capture},
          {"process_start", &c.process_start},
          {"comm_init_base", &c.comm_init_base},
          {"fanout_per_machine", &c.fanout_per_machine},
          {"link_dial", &c.link_dial},
          {"links_per_survivor", &c.links_per_survivor},
          {"links_per_new_rank", &c.links_per_new_rank},
          {"ring_hop", &c.ring_hop},
          {"abort_hops_per_rank", &c.abort_hops_per_rank},
          {"store_ops_per_ring", &c.store_ops_per_ring},
          {"store_op_base", &c.store_op_base},
          {"store_op_per_client", &c.store_op_per_client},
          {"restore_memory", &c.restore_memory},
          {"restore_durable", &c.restore_durable},
          {"step", &c.step},
          {"durable_interval", &c.durable_interval},
          {"durable_write", &c.durable_write},
          {"memory_block_per_step", &c.memory_block_per_step},
          {"provision", &c.provision},
          {"requeue", &c.requeue},
          {"reschedule", &c.reschedule},
          {"baseline_timeout", &c.baseline_timeout},
          {"baseline_watchdog", &c.baseline_watchdog},
          {"step_jitter", &c.step_jitter},
          {"compute_share", &c.compute_share},
          {"slow_factor_min", &c.slow_factor_min},
          {"slow_factor_max", &c.slow_factor_max},
          {"diagnose", &c.diagnose},
          {"replay", &c.replay},
          {"sdc_found", &c.sdc_found},
          {"regroup", &c.regroup},
          {"elastic_micro_batches", &c.elastic_micro_batches}};
}

}  // namespace

const char* FaultClassName(FaultClass c) { return kClassNames[static_cast<int>(c)]; }

const char* RendezvousName(Costs::Rendezvous r) { return r == Costs::Rendezvous::kStore ? "store" : "neighbours"; }

const char* RecoveryName(SimConfig::Recovery r) {
  switch (r) {
    case SimConfig::Recovery::kAuto: return "auto";
    case SimConfig::Recovery::kElastic: return "elastic";
    case SimConfig::Recovery::kWholeWorld: return "standby";
  }
  return "auto";
}

Result<SimConfig> ConfigFromJson(const json& j, SimConfig c) {
  if (!j.is_object()) return Status::InvalidArgument("sim config: expected a mapping at the top level");
  const bool racks_before = c.domains.on();
  const bool network_given = j.contains("faults") && j["faults"].is_object() && j["faults"].contains("network");
  for (const auto& [key, v] : j.items()) {
    if (key == "domains") {
      if (!v.is_object()) return Bad("domains", "expected a mapping: rack_machines, switch_per_rack_day, switch_repair, placement, infant_factor, infant_days");
      for (const auto& [name, val] : v.items()) {
        const std::string field = "domains." + name;
        if (name == "placement") {
          const std::string p = val.is_string() ? val.get<std::string>() : val.dump();
          if (p != "aware" && p != "blind") return Bad(field, "'" + p + "' is not one of: aware, blind");
          c.domains.aware = p == "aware";
          continue;
        }
        Result<double> x = Number(val, field);
        if (!x.ok()) return x.status();
        if (name == "rack_machines") c.domains.rack_machines = static_cast<int>(*x);
        else if (name == "switch_per_rack_day") c.domains.switch_per_rack_day = *x;
        else if (name == "switch_repair") c.domains.switch_repair = *x;
        else if (name == "infant_factor") c.domains.infant_factor = *x;
        else if (name == "infant_days") c.domains.infant_days = *x;
        else return Bad(field, "unknown field; use rack_machines, switch_per_rack_day, switch_repair, placement, infant_factor, infant_days");
      }
    } else if (key == "faults") {
      if (!v.is_object()) return Bad("faults", "expected a mapping of fault class -> rate per machine-day");
      for (const auto& [name, rate] : v.items()) {
        Result<double> x = Number(rate, "faults." + name);
        if (!x.ok()) return x.status();
        if (name == "manual_per_day") {
          c.rates.manual_per_day = *x;
          continue;
        }
        if (name == "benign_spikes_per_day") {
          c.rates.benign_spikes_per_day = *x;
          continue;
        }
        Result<FaultClass> cls = ParseClass("faults." + name, name);
        if (!cls.ok()) return cls.status();
        c.rates.per_machine_day[static_cast<int>(*cls)] = *x;
      }
    } else if (key == "costs") {
      if (!v.is_object()) return Bad("costs", "expected a mapping of cost name -> seconds");
      for (const auto& [name, val] : v.items()) {
        if (name == "memory_checkpoints" || name == "sdc_shows_locally") {
          if (!val.is_boolean()) return Bad("costs." + name, "expected true or false");
          (name == "memory_checkpoints" ? c.costs.memory_checkpoints : c.costs.sdc_shows_locally) = val.get<bool>();
          continue;
        }
        if (name == "stack_sample_replicas") {
          Result<double> x = Number(val, "costs." + name);
          if (!x.ok()) return x.status();
          c.costs.stack_sample_replicas = static_cast<int>(*x);
          continue;
        }
        bool found = false;
        for (auto& [n, field] : CostFields(c.costs)) {
          if (name != n) continue;
          Result<double> x = Number(val, "costs." + name);
          if (!x.ok()) return x.status();
          *field = *x;
          found = true;
        }
        if (!found) return Bad("costs." + name, "unknown cost; see src/sim/config.h");
      }
    } else if (key == "policy") {
      BULWARK_RETURN_IF_ERROR(controller::ApplyPolicyJson(v, &c.policy));
    } else if (key == "script") {
      if (!v.is_array()) return Bad("script", "expected a list of {at_step, class, slot}");
      c.script.clear();
      for (const json& f : v) {
        ScriptedFault s;
        if (!f.is_object() || !f.contains("at_step") || !f.contains("class")) {
          return Bad("script", "each entry needs at_step and class (slot defaults to 0)");
        }
        Result<FaultClass> cls = ParseClass("script.class", f["class"].get<std::string>());
        if (!cls.ok()) return cls.status();
        s.cls = *cls;
        s.at_step = f["at_step"].get<int64_t>();
        s.slot = f.value("slot", 0);
        c.script.push_back(s);
      }
    } else if (key == "returned_classes") {
      c.returned_classes.clear();
      for (const json& n : v) {
        Result<FaultClass> cls = ParseClass("returned_classes", n.get<std::string>());
        if (!cls.ok()) return cls.status();
        c.returned_classes.push_back(*cls);
      }
    } else if (key == "elastic") {
      // The older key: true is recovery elastic, false the whole-world restart.
      if (!v.is_boolean()) return Bad("elastic", "expected true or false (or use recovery: elastic|standby|auto)");
      c.recovery = v.get<bool>() ? SimConfig::Recovery::kElastic : SimConfig::Recovery::kWholeWorld;
    } else if (key == "recovery") {
      const std::string r = v.is_string() ? v.get<std::string>() : v.dump();
      if (r == "elastic") c.recovery = SimConfig::Recovery::kElastic;
      else if (r == "standby" || r == "whole-world") c.recovery = SimConfig::Recovery::kWholeWorld;
      else if (r == "auto") c.recovery = SimConfig::Recovery::kAuto;
      else return Bad("recovery", "'" + r + "' is not one of: auto, elastic, standby (the whole-world restart)");
    } else if (key == "rendezvous") {
      const std::string r = v.is_string() ? v.get<std::string>() : v.dump();
      if (r == "store") c.costs.rendezvous = Costs::Rendezvous::kStore;
      else if (r == "neighbours") c.costs.rendezvous = Costs::Rendezvous::kNeighbours;
      else return Bad("rendezvous", "'" + r + "' is not one of: neighbours (the default: built for elastic jobs), store");
    } else if (v.is_boolean() && (key == "oracle_standbys" || key == "provisioning" || key == "fit_first_step_allowance" ||
                                  key == "compare_whole_world")) {
      (key == "oracle_standbys"       ? c.oracle_standbys
       : key == "provisioning"        ? c.provisioning
       : key == "compare_whole_world" ? c.compare_whole_world
                                      : c.fit_first_step_allowance) = v.get<bool>();
    } else {
      Result<double> x = Number(v, key);
      if (!x.ok()) return x.status();
      if (key == "gpus") c.gpus = static_cast<int>(*x);
      else if (key == "gpus_per_machine") c.gpus_per_machine = static_cast<int>(*x);
      else if (key == "tp") c.tp = static_cast<int>(*x);
      else if (key == "bug_step") c.bug_step = static_cast<int64_t>(*x);
      else if (key == "bug_slot") c.bug_slot = static_cast<int>(*x);
      else if (key == "pp") c.pp = static_cast<int>(*x);
      else if (key == "days") c.days = *x;
      else if (key == "seed") c.seed = static_cast<uint64_t>(*x);
      else if (key == "initial_standbys") c.initial_standbys = static_cast<int>(*x);
      else if (key == "return_after") c.return_after = *x;
      else if (key == "total_steps") c.total_steps = static_cast<int64_t>(*x);
      else return Bad(key, "unknown field; see docs/simulator.md for the config keys");
    }
  }
  // Racks turned on here: Llama 3's switch and cable faults move from the
  // network class to the switches (config.h, Domains), unless the network
  // rate was given.
  if (c.domains.on() && !racks_before && !network_given) {
    c.rates.per_machine_day[static_cast<int>(FaultClass::kNetwork)] = 7 / FaultRates::kLlamaMachineDays;
  }
  BULWARK_RETURN_IF_ERROR(Validate(c));
  return c;
}

void FitPipeline(SimConfig& c) {
  if (c.tp <= 0 || c.pp <= 0 || c.gpus <= 0 || c.gpus % c.tp != 0) return;
  while (c.pp > 1 && c.gpus % (c.tp * c.pp) != 0) --c.pp;
}

Status Validate(const SimConfig& c) {
  if (c.gpus_per_machine <= 0) return Bad("gpus_per_machine", "must be > 0 (8 for an HGX machine)");
  if (c.gpus <= 0 || c.machines() <= 0) {
    return Bad("gpus", std::to_string(c.gpus) + " gives zero machines; give at least gpus_per_machine (" +
                           std::to_string(c.gpus_per_machine) + ") GPUs");
  }
  if (c.gpus % c.gpus_per_machine != 0) {
    return Bad("gpus", std::to_string(c.gpus) + " is not a multiple of gpus_per_machine " +
                           std::to_string(c.gpus_per_machine));
  }
  if (c.tp <= 0 || c.pp <= 0 || c.gpus % (c.tp * c.pp) != 0) {
    return Bad("tp/pp", "tp x pp = " + std::to_string(c.tp * c.pp) + " must divide gpus " + std::to_string(c.gpus) +
                            "; pick tp and pp whose product divides it");
  }
  if (c.recovery == SimConfig::Recovery::kElastic && !c.ElasticLayout()) {
    return Bad("elastic", "needs machines that each hold whole TP groups of one stage: tp dividing "
                          "gpus_per_machine and, with pp > 1, gpus / pp a multiple of gpus_per_machine (tp " +
                              std::to_string(c.tp) + ", pp " + std::to_string(c.pp) +
                              "); change tp/pp or use recovery: standby");
  }
  if (!(c.costs.elastic_micro_batches >= 1)) return Bad("costs.elastic_micro_batches", "must be >= 1");
  if (!(c.days > 0)) return Bad("days", "must be > 0");
  for (int i = 0; i < kNumFaultClasses; ++i) {
    const double r = c.rates.per_machine_day[i];
    if (!(r >= 0) || !std::isfinite(r)) {
      return Bad(std::string("faults.") + kClassNames[i],
                 "rate " + std::to_string(r) + " is negative or not a number; give a rate >= 0 per machine-day");
    }
  }
  if (!(c.rates.manual_per_day >= 0)) {
    return Bad("faults.manual_per_day", "rate is negative; give restarts per day >= 0");
  }
  if (!(c.rates.benign_spikes_per_day >= 0)) {
    return Bad("faults.benign_spikes_per_day", "rate is negative; give spikes per day >= 0");
  }
  if (!(c.costs.slow_factor_max >= c.costs.slow_factor_min && c.costs.slow_factor_min >= 1)) {
    return Bad("costs.slow_factor_min", "must be >= 1 and <= slow_factor_max");
  }
  if (!(c.costs.sdc_found <= 1)) return Bad("costs.sdc_found", "is a probability; give a value in [0, 1]");
  if (c.costs.stack_sample_replicas < 1) return Bad("costs.stack_sample_replicas", "must be at least 1");
  Costs copy = c.costs;
  for (auto& [name, field] : CostFields(copy)) {
    if (field == &copy.regroup && *field == -1) continue;  // -1: priced from the coefficients
    if (!(*field >= 0) || !std::isfinite(*field)) {
      return Bad(std::string("costs.") + name, "is negative or not a number; give seconds >= 0");
    }
  }
  if (!(c.costs.step > 0)) return Bad("costs.step", "must be > 0 seconds");
  if (!(c.costs.durable_interval > 0)) return Bad("costs.durable_interval", "must be > 0 seconds");
  // The agents' beats and the plane's checks are on the simulated clock's
  // milliseconds: under one, every check would come a millisecond apart.
  if (!(c.costs.report_period >= 0.001)) return Bad("costs.report_period", "must be at least 0.001 seconds (0.5: the agent's)");
  if (!(c.costs.tick_period >= 0.001)) return Bad("costs.tick_period", "must be at least 0.001 seconds (0.25: the plane's)");
  if (c.return_after < 0) return Bad("return_after", "is negative; give seconds >= 0");
  for (const ScriptedFault& s : c.script) {
    if (s.slot < 0 || s.slot >= c.machines()) {
      return Bad("script.slot", std::to_string(s.slot) + " is outside the job's " + std::to_string(c.machines()) +
                                    " machines");
    }
  }
  if (c.domains.rack_machines < 0) return Bad("domains.rack_machines", "must be >= 0 (0: no racks)");
  if (!(c.domains.switch_per_rack_day >= 0) || !(c.domains.switch_repair >= 0) || !(c.domains.infant_factor >= 1) ||
      !(c.domains.infant_days >= 0)) {
    return Bad("domains", "switch_per_rack_day, switch_repair and infant_days must be >= 0, infant_factor >= 1");
  }
  Status p = c.policy.Validate();
  if (!p.ok()) return Bad("policy", p.message());
  return Status::OK();
}

json ToJson(const SimConfig& c) {
  json faults;
  for (int i = 0; i < kNumFaultClasses; ++i) faults[kClassNames[i]] = c.rates.per_machine_day[i];
  faults["manual_per_day"] = c.rates.manual_per_day;
  faults["benign_spikes_per_day"] = c.rates.benign_spikes_per_day;
  json costs;
  Costs copy = c.costs;
  for (auto& [name, field] : CostFields(copy)) costs[name] = *field;
  costs["memory_checkpoints"] = c.costs.memory_checkpoints;
  costs["sdc_shows_locally"] = c.costs.sdc_shows_locally;
  costs["stack_sample_replicas"] = c.costs.stack_sample_replicas;
  return {{"gpus", c.gpus},
          {"gpus_per_machine", c.gpus_per_machine},
          {"machines", c.machines()},
          {"tp", c.tp},
          {"pp", c.pp},
          {"days", c.days},
          {"seed", c.seed},
          {"initial_standbys", c.initial_standbys},
          {"oracle_standbys", c.oracle_standbys},
          {"provisioning", c.provisioning},
          {"fit_first_step_allowance", c.fit_first_step_allowance},
          {"recovery", c.Elastic() ? "elastic" : "standby"},
          {"recovery_asked", RecoveryName(c.recovery)},
          {"elastic", c.Elastic()},
          {"rendezvous", RendezvousName(c.costs.rendezvous)},
          {"rendezvous_built", SimConfig::RendezvousBuilt(c.costs.rendezvous, c.Elastic())},
          {"regroup_assumed", c.RegroupAssumed()},
          {"compare_whole_world", c.compare_whole_world},
          {"faults", faults},
          {"domains",
           {{"rack_machines", c.domains.rack_machines},
            {"switch_per_rack_day", c.domains.switch_per_rack_day},
            {"switch_repair", c.domains.switch_repair},
            {"placement", c.domains.aware ? "aware" : "blind"},
            {"infant_factor", c.domains.infant_factor},
            {"infant_days", c.domains.infant_days}}},
          {"costs", costs},
          {"policy", controller::PolicyJson(controller::PolicyValues(c.policy))}};
}

}  // namespace bulwark::sim
