// `bulwark status`, `incidents` and `ledger` (status_commands.h).
#include "cli/status_commands.h"

#include <cstdio>
#include <functional>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "control_client/control_client.h"
#include "controller/policy_json.h"
#include "cli/args.h"

namespace bulwark::cli {

using control_client::ControlClient;
namespace {

using nlohmann::json;

void Print(const json& j, bool as_json, const std::function<void(const json&)>& human);

// A read-only query of the controller, printed as JSON (--json) or for a person.
Status Show(const Args& a, Result<json> (ControlClient::*query)(), const std::function<void(const json&)>& human) {
  Result<ControlClient> client = ControlClient::Connect(ClusterDir(a));
  if (!client.ok()) return client.status();
  client->set_job(a.Get("job"));  // "" (no --job): the first job
  Result<json> r = ((*client).*query)();
  if (!r.ok()) return r.status();
  Print(*r, a.Has("json"), human);
  return Status::OK();
}

void Print(const json& j, bool as_json, const std::function<void(const json&)>& human) {
  if (as_json) {
    std::cout << j.dump(2) << "\n";
  } else {
    human(j);
  }
}

}  // namespace

Status StatusCmd(const Args& a) {
  return Show(a, &ControlClient::Status, [](const json& j) {
    if (j.contains("error")) std::cout << "CONTROLLER ERROR: " << j["error"].get<std::string>() << "\n";
    if (j.value("metrics", json()).is_string()) std::cout << "metrics at " << j["metrics"].get<std::string>() << "\n";
    // The thresholds `up --policy` set away from their defaults, as the
    // controller's log says them.
    if (controller::PolicyConfig p; j.value("policy", json::object()).size() > 0 &&
                                    controller::ApplyPolicyJson(j["policy"], &p).ok()) {
      std::cout << "policy: " << controller::DescribePolicy(controller::ChangedPolicy(p)) << "\n";
    }
    if (j["job"].is_null()) {
      std::cout << "no job submitted\n";
    } else {
      const json& job = j["job"];
      // A completed job: the step it ended at and how it ended.
      const bool done = job.value("done_step", json()).is_number();
      std::cout << "job " << job["id"].get<std::string>() << ": " << job["state"].get<std::string>()
                << (done ? " at step " : ", step ") << (done ? job["done_step"] : job["last_step"])
                << (done && job.value("done_why", json()).is_string() && !job["done_why"].get<std::string>().empty()
                        ? " (" + job["done_why"].get<std::string>() + ")"
                        : "")
                << ", generation " << job["generation"] << ", placement " << job["placement"].dump();
      // An elastic job below full width says by how much.
      if (job.value("training_world_size", 0) < job.value("world_size", 0)) {
        std::cout << ", training on " << job["training_world_size"] << " of " << job["world_size"] << " ranks";
      }
      std::cout << ", incidents " << job["incidents"] << "\n";
      // A job whose file set thresholds of its own runs with more than the cluster's.
      if (controller::PolicyConfig p; job.value("policy", json::object()) != j.value("policy", json::object()) &&
                                      controller::ApplyPolicyJson(job["policy"], &p).ok()) {
        std::cout << "job policy: " << controller::DescribePolicy(controller::ChangedPolicy(p)) << "\n";
      }
      // The periodic bitwise check beside the ranks, when it is on.
      if (const json& c = job.value("align_check", json::object()); c.value("every_s", 0.0) > 0) {
        std::printf("bitwise check every %g s: %s run, %s clean%s", c["every_s"].get<double>(), c["checks"].dump().c_str(),
                    c["clean"].dump().c_str(), c["in_flight"].is_null() ? "" : ", one running");
        const std::string last = c.value("last", "");
        std::cout << (last.empty() ? "" : "; last: " + last) << "\n";
      }
    }
    for (const json& m : j["machines"]) {
      // The in-memory checkpoint copies it holds: "r0@812 backup r1@812".
      std::string shards;
      for (const json& c : m.value("shards", json::array())) {
        shards += std::string(shards.empty() ? "" : " ") + (c.value("copy", "") == "backup" ? "backup " : "") + "r" +
                  c["rank"].dump() + "@" + c["step"].dump();
      }
      std::printf("  %-5s %-10s heard %.1fs ago, ranks %s%s  %s\n", m["id"].get<std::string>().c_str(),
                  m["state"].get<std::string>().c_str(), m["last_heard_s_ago"].get<double>(),
                  m["live_ranks"].dump().c_str(), shards.empty() ? "" : (", shards " + shards).c_str(),
                  m.value("reason", "").c_str());
    }
  });
}

Status IncidentsCmd(const Args& a) {
  return Show(a, &ControlClient::Incidents, [](const json& j) {
    if (j.empty()) std::cout << "no incidents\n";
    for (const json& i : j) {
      std::cout << i["summary"].get<std::string>() << "\n    detect " << i["detect_s"] << " s";
      if (i.contains("recover_s")) std::cout << ", recover " << i["recover_s"] << " s";
      if (i.contains("restore_source")) {
        std::cout << ", restored step " << i["restored_step"] << " from " << i["restore_source"].get<std::string>();
        if (i.contains("restore_ms")) std::printf(" in %.0f ms", i["restore_ms"].get<double>());
      }
      if (i.contains("localize_s")) std::cout << ", localize " << i["localize_s"] << " s";
      if (i.contains("lost_steps")) std::cout << ", lost steps " << i["lost_steps"];
      std::cout << "\n";
      // Elastic jobs: the survivors' stall, then how long they trained narrower.
      if (i.contains("trained_on")) {
        std::printf("    stall %.3f s, then %d rank(s) trained on", i.value("stall_s", -1.0), i["trained_on"].get<int>());
        if (i.contains("degraded_s")) {
          std::printf(" until the job was back at full width %.1f s later\n", i["degraded_s"].get<double>());
        } else {
          std::printf("; not at full width since\n");
        }
      }
      // Implicit incidents: the stack groups the analyzer found.
      if (i.contains("stacks")) {
        const json& st = i["stacks"];
        for (const json& g : st["groups"]) {
          std::string ranks;
          for (const json& r : g["ranks"]) ranks += (ranks.empty() ? "" : ",") + std::to_string(r.get<int>());
          std::string stack = g["stack"].get<std::string>();
          if (stack.size() > 110) stack = stack.substr(0, 107) + "...";
          std::printf("    %3d rank(s) {%s}: %s\n", g["count"].get<int>(), ranks.c_str(), stack.c_str());
        }
        if (!st["missing"].empty()) std::cout << "    no stack from ranks " << st["missing"].dump() << "\n";
      }
      if (i.contains("notes")) {
        for (const json& n : i["notes"]) std::cout << "    note: " << n.get<std::string>() << "\n";
      }
      // The stop-time ladder's rungs, with their timings.
      if (i.contains("ladder")) {
        for (const json& r : i["ladder"]) {
          const std::string took =
              r.contains("seconds") ? std::to_string(r["seconds"].get<double>()).substr(0, 6) + " s" : "running";
          std::printf("    ladder %-9s %-9s %s\n", r["rung"].get<std::string>().c_str(), took.c_str(),
                      r["outcome"].get<std::string>().c_str());
        }
      }
    }
  });
}

Status LedgerCmd(const Args& a) {
  return Show(a, &ControlClient::Ledger, [](const json& j) {
    if (j.contains("error")) std::cout << "CONTROLLER ERROR: " << j["error"].get<std::string>() << "\n";
    if (j.value("metrics", json()).is_string()) std::cout << "metrics at " << j["metrics"].get<std::string>() << "\n";
    if (j["job"].is_null()) {
      std::cout << "no job submitted\n";
      return;
    }
    for (const char* which : {"cumulative", "window"}) {
      const json& b = j[which];
      std::printf("%-10s ETTR %.3f over %.1f s:", which, b["ettr"].get<double>(), b["wall_s"].get<double>());
      for (const auto& [k, v] : b["seconds"].items()) {
        if (v.get<double>() > 0) std::printf(" %s %.1fs", k.c_str(), v.get<double>());
      }
      std::printf("\n");
    }
  });
}

}  // namespace bulwark::cli
