// The run's figures as text, JSON and an HTML page with an SVG timeline.
#include <cstdio>
#include <sstream>

#include "controller/liveness_detector.h"
#include "sim/sim.h"

namespace bulwark::sim {

using controller::TimeCategory;
using controller::TimeCategoryName;
using nlohmann::json;

namespace {

std::string Fmt(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

std::string Hours(double s) { return s >= 3600 ? Fmt("%.1f h", s / 3600) : s >= 60 ? Fmt("%.1f min", s / 60) : Fmt("%.1f s", s); }

}  // namespace

std::string FormatText(const SimConfig& c, const SimResult& r) {
  std::ostringstream o;
  const FleetStats& f = r.fleet;
  o << "bulwark sim: " << c.gpus << " GPUs (" << c.machines() << " machines x " << c.gpus_per_machine << ", TP "
    << c.tp << " PP " << c.pp << " DP " << c.gpus / (c.tp * c.pp) << "), " << c.days << " days, seed " << c.seed
    << "\n";
  o << "standby pool: " << f.initial_standbys << " at start (policy target P" << 100 * c.policy.standby_quantile
    << " of Binomial(" << c.machines() << ", " << c.policy.daily_failure_rate << ") = " << f.standby_target
    << "); provisioning " << Hours(c.costs.provision) << "\n";
  const bool built = SimConfig::RendezvousBuilt(c.costs.rendezvous, c.Elastic());
  if (c.Elastic()) {
    o << "recovery: elastic (survivors keep their processes and state; a lost machine costs its replica, " << c.pp
      << " machine(s), 1/" << c.dp()
      << " of the throughput, until a standby takes its slot; with none the job trains on its whole replicas)\n";
  } else {
    o << "recovery: whole-world restart (standby)"
      << (c.recovery == SimConfig::Recovery::kAuto ? ": this layout cannot be elastic" : "") << "\n";
  }
  o << "rendezvous: " << RendezvousName(c.costs.rendezvous)
    << (c.costs.rendezvous == Costs::Rendezvous::kStore
            ? " (as built for a whole-world job: every rank's operations queue at one TCPStore on rank 0)"
        : built ? " (as built for an elastic job: each rank's ring plan comes with its start command, no store; the "
                  "whole-world arm is priced the same, which its Gloo rendezvous through the store is not)"
                : " (NOT BUILT for a whole-world job: its Gloo mesh rendezvous through the store; --rendezvous store "
                  "prices it as built)")
    << "\n";
  auto parts = [&](const SimConfig::Price& p) {
    std::string s = Hours(p.Total()) + " = ";
    if (p.assumed_regroup >= 0) {
      s += "regroup " + Hours(p.assumed_regroup) + " GIVEN BY --regroup (an assumption, not priced)";
    } else {
      s += "fan-out " + Hours(p.fanout) + " + store " + Hours(p.store) + " + links " + Hours(p.links) +
           " + handshake " + Hours(p.handshake) + (p.abort > 0 ? " + abort round the ring " + Hours(p.abort) : "");
    }
    if (p.process_start > 0) s += " + process start " + Hours(p.process_start);
    if (p.comm_init > 0) s += " + communicator set-up " + Hours(p.comm_init);
    if (p.restore > 0) s += " + restore " + Hours(p.restore);
    return s + " + one step " + Hours(p.step);
  };
  if (c.Elastic()) o << "elastic restart (survivors' stall, full width): " << parts(c.ElasticRestart(c.machines(), false)) << "\n";
  o << "whole-world restart: " << parts(c.WorldRestart(c.machines())) << "\n";
  o << "hang first-step allowance " << Hours(f.hang_first_step)
    << (f.hang_first_step_raised ? " (raised from the policy's value to 2x the whole-world restart: fit_first_step_allowance)" : "")
    << "\n\n";

  o << "ETTR (same fault trace)     ledger   progress   with ckpt stalls   min 1h window   longest unproductive\n";
  for (const ArmResult& a : r.arms) {
    o << "  ";
    char line[256];
    std::snprintf(line, sizeof line, "%-22s %7.3f%%   %8s   %15.3f%%   %13s   %s\n", a.name.c_str(), 100 * a.ettr,
                  a.ettr_by_steps < 0 ? "-" : Fmt("%.3f%%", 100 * a.ettr_by_steps).c_str(), 100 * a.ettr_with_stalls,
                  a.window_min_ettr < 0 ? "-" : Fmt("%.2f%%", 100 * a.window_min_ettr).c_str(),
                  Hours(a.longest_unproductive).c_str());
    o << line;
  }
  o << "  (progress: new steps x full-width step time / wall, the throughput-weighted ETTR)\n";
  if (!r.whole_world.empty()) {
    const FleetStats& w = r.whole_world[0];
    o << "  whole-world arm: " << w.restarts << " restarts, " << w.incident_count << " incidents, " << w.evicted
      << " evicted (" << w.healthy_evicted << " healthy"
      << (c.policy.checkup_evicted ? ", " + std::to_string(w.checkup_returned) + " back after a checkup" : "")
      << "), " << w.standbys_requested << " standbys requested; fault trace " << (w.trace_digest == f.trace_digest && w.trace_faults == f.trace_faults
                                          ? "identical to the elastic arm's"
                                          : "DIFFERENT from the elastic arm's")
      << " (" << w.trace_faults << " faults drawn)\n";
  }
  o << "\nbreakdown (share of wall)  ";
  for (const ArmResult& a : r.arms) o << std::string(21 - std::min<size_t>(21, a.name.size()), ' ') << a.name;
  o << "\n";
  for (int i = 0; i < controller::kNumTimeCategories; ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "  %-24s", TimeCategoryName(static_cast<TimeCategory>(i)));
    o << line;
    for (const ArmResult& a : r.arms) o << Fmt("%20.3f%%", 100 * a.by_category[i] / a.wall);
    o << "\n";
  }
  o << "\nfaults: ";
  static const char* names[] = {"gpu", "hbm", "software", "network", "host", "hang", "sdc", "fail_slow", "nic_flap", "manual"};
  for (int i = 0; i < 10; ++i) o << names[i] << " " << f.faults_by_class[i] << (i < 9 ? ", " : "\n");
  o << "incidents: " << f.incident_count << " (mean detect " << Hours(f.mean_detect) << ", mean recover "
    << Hours(f.mean_recover) << ")\n";
  for (const auto& [cls, by] : f.incidents) {
    o << "  " << cls << ":";
    for (const auto& [res, n] : by) o << " " << res << " " << n;
    o << "\n";
  }
  o << "machines: " << f.evicted << " evicted (" << f.healthy_evicted << " healthy, over-evicted), "
    << f.restarts << " restarts";
  if (c.Elastic()) {
    o << " (" << f.regroups << " regroups of survivors, " << f.narrow_restarts << " onto fewer replicas; "
      << f.returned_to_pool << " machines of broken pipelines back to the pool)";
  }
  o << ", restarts priced " << Hours(f.restart_seconds) << " in all\n";
  o << "liveness: " << f.heartbeat_lost + f.heartbeat_lost_with_domain
    << " machines lost for their silence by the core's own rule (controller/liveness_detector.h: learned lease, "
    << "domain skew, mass-silence grace, " << controller::LivenessDetector::kLostPerTick << " a tick), "
    << f.heartbeat_lost_with_domain << " of them decided with their failure domain (every machine of a rack is, "
    << "a lone host's loss too: policy_domains.cc tells a switch's burst from it); agents report every "
    << c.costs.report_period << " s, checked every " << c.costs.tick_period << " s (" << f.liveness_checks
    << " checks, while a silent machine could be lost); lease at most " << f.max_lease << " s (heartbeat_timeout "
    << c.costs.heartbeat_timeout << " s); " << f.mass_silences << " mass silences\n";
  o << "standby deficits: " << f.waits << " evictions found the pool empty, max deficit " << f.max_deficit
    << ", " << f.standbys_requested << " requested, " << f.standbys_arrived << " arrived, waiting "
    << Hours(r.arms[0].by_category[static_cast<int>(TimeCategory::kWaiting)]) << "\n";
  if (c.domains.on()) {
    o << "failure domains: " << f.racks << " racks of " << c.domains.rack_machines << " machines, placement "
      << (c.domains.aware ? "aware" : "blind") << "; " << f.switch_faults << " switch faults took "
      << f.switch_machines_lost << " machines (" << f.switch_placed_lost << " placed, in "
      << f.switch_replicas_hit << " replica-hits), " << f.domain_incidents << " incidents named a switch, "
      << f.switch_returned << " machines back after repair (" << Hours(c.domains.switch_repair) << "), "
      << f.switch_kept_out << " kept out (the rack's only live machine, a machine fault to the controller, or a flapping switch's); "
      << f.switch_checkups_cut << " cut off during their checkup; infant failures " << f.infant_faults << "\n";
  }
  if (c.policy.checkup_evicted) {
    o << "checkups: " << f.checkups << " over-evicted machines checked off the job's path, " << f.checkup_returned
      << " back in the pool (" << f.checkup_returned_broken << " with a fault the checkup missed) after "
      << Hours(f.checkup_return_mean_s) << " on average (max " << Hours(f.checkup_return_max_s) << "), "
      << f.checkup_kept << " kept out; of those back, " << f.suspect_returned << " over-evicted on suspicion, after "
      << Hours(f.suspect_return_mean_s) << " on average (max " << Hours(f.suspect_return_max_s) << ")\n";
  }
  o << Fmt("capacity: healthy machines out of service %.0f machine-days; %.0f machines in service at the end, "
           "of %.0f at the start (placed and standing by)\n",
           f.healthy_out_days, f.in_service_end, f.machines + f.initial_standbys);
  o << "slow machines: " << f.faults_by_class[static_cast<int>(FaultClass::kFailSlow)] << " (" << f.slow_undetected
    << " never flagged by the fail-slow detector: they slow every step until another fault takes them out)\n";
  if (f.stopped) o << "STOPPED by the policy: " << f.stop_reason << "\n";
  if (f.refused > 0) o << "events refused by the controller: " << f.refused << " (first: " << f.first_refusal << ")\n";
  o << Fmt("speed: %.0f events in %.3f s = %.0f events/s\n", static_cast<double>(f.events), r.cpu_seconds,
           f.events / std::max(1e-9, r.cpu_seconds));
  return o.str();
}

json ToJson(const SimConfig& c, const SimResult& r, bool timing) {
  json arms = json::array();
  for (const ArmResult& a : r.arms) {
    json cats;
    for (int i = 0; i < controller::kNumTimeCategories; ++i) {
      cats[TimeCategoryName(static_cast<TimeCategory>(i))] = a.by_category[i];
    }
    arms.push_back({{"name", a.name},
                    {"wall_s", a.wall},
                    {"ettr", a.ettr},
                    {"ettr_with_checkpoint_stalls", a.ettr_with_stalls},
                    {"ettr_by_steps", a.ettr_by_steps},
                    {"window_min_ettr", a.window_min_ettr},
                    {"longest_unproductive_s", a.longest_unproductive},
                    {"faults", a.faults},
                    {"breakdown_s", cats}});
  }
  const FleetStats& f = r.fleet;
  json out{{"config", ToJson(c)},
           {"arms", arms},
           {"fleet",
            {{"machines", f.machines},
             {"initial_standbys", f.initial_standbys},
             {"standby_target", f.standby_target},
             {"hang_first_step_s", f.hang_first_step},
             {"hang_first_step_raised", f.hang_first_step_raised},
             {"events", f.events},
             {"refused", f.refused},
             {"restarts", f.restarts},
             {"evicted", f.evicted},
             {"healthy_evicted", f.healthy_evicted},
             {"standbys_requested", f.standbys_requested},
             {"standbys_arrived", f.standbys_arrived},
             {"waits", f.waits},
             {"max_deficit", f.max_deficit},
             {"stopped", f.stopped},
             {"incidents", f.incidents},
             {"incident_count", f.incident_count},
             {"mean_detect_s", f.mean_detect},
             {"mean_recover_s", f.mean_recover},
             {"faults_by_class", f.faults_by_class},
             {"slow_undetected", f.slow_undetected},
             {"regroups", f.regroups},
             {"narrow_restarts", f.narrow_restarts},
             {"returned_to_pool", f.returned_to_pool},
             {"restart_seconds", f.restart_seconds},
             {"trace_faults", f.trace_faults},
             {"trace_digest", f.trace_digest},
             {"liveness",
              {{"lost", f.heartbeat_lost},
               {"lost_with_domain", f.heartbeat_lost_with_domain},
               {"checks", f.liveness_checks},
               {"mass_silences", f.mass_silences},
               {"max_lease_s", f.max_lease}}},
             {"domains",
              {{"racks", f.racks},
               {"switch_faults", f.switch_faults},
               {"switch_machines_lost", f.switch_machines_lost},
               {"switch_placed_lost", f.switch_placed_lost},
               {"switch_replicas_hit", f.switch_replicas_hit},
               {"switch_returned", f.switch_returned},
               {"switch_kept_out", f.switch_kept_out},
               {"switch_checkups_cut", f.switch_checkups_cut},
               {"domain_incidents", f.domain_incidents},
               {"infant_faults", f.infant_faults}}},
             {"checkups",
              {{"on", c.policy.checkup_evicted},
               {"checked", f.checkups},
               {"returned", f.checkup_returned},
               {"returned_with_fault", f.checkup_returned_broken},
               {"kept_out", f.checkup_kept},
               {"return_mean_s", f.checkup_return_mean_s},
               {"return_max_s", f.checkup_return_max_s},
               {"suspect_returned", f.suspect_returned},
               {"suspect_return_mean_s", f.suspect_return_mean_s},
               {"suspect_return_max_s", f.suspect_return_max_s}}},
             {"healthy_out_days", f.healthy_out_days},
             {"in_service_end", f.in_service_end}}}};
  auto price = [](const SimConfig::Price& p) {
    json j{{"total_s", p.Total()}, {"regroup_s", p.Regroup()}, {"fanout_s", p.fanout}, {"store_s", p.store},
           {"links_s", p.links}, {"handshake_s", p.handshake}, {"abort_s", p.abort},
           {"process_start_s", p.process_start}, {"comm_init_s", p.comm_init}, {"restore_s", p.restore},
           {"step_s", p.step}};
    if (p.assumed_regroup >= 0) j["assumed_regroup_s"] = p.assumed_regroup;
    return j;
  };
  out["restart_price"] = {
      {"rendezvous", RendezvousName(c.costs.rendezvous)},
      {"rendezvous_built", SimConfig::RendezvousBuilt(c.costs.rendezvous, c.Elastic())},
      {"regroup_source", c.RegroupAssumed() ? "assumed (--regroup / costs.regroup)" : "priced from the coefficients"},
      {"whole_world", price(c.WorldRestart(c.machines()))}};
  if (c.Elastic()) out["restart_price"]["elastic"] = price(c.ElasticRestart(c.machines(), false));
  if (!r.whole_world.empty()) {
    const FleetStats& w = r.whole_world[0];
    out["whole_world_fleet"] = {{"restarts", w.restarts},
                                {"slow_undetected", w.slow_undetected},
                                {"incident_count", w.incident_count},
                                {"evicted", w.evicted},
                                {"waits", w.waits},
                                {"restart_seconds", w.restart_seconds},
                                {"trace_faults", w.trace_faults},
                                {"trace_digest", w.trace_digest},
                                {"domain_incidents", w.domain_incidents},
                                {"switch_replicas_hit", w.switch_replicas_hit},
                                {"infant_faults", w.infant_faults},
                                {"healthy_evicted", w.healthy_evicted},
                                {"standbys_requested", w.standbys_requested},
                                {"checkups", w.checkups},
                                {"checkup_returned", w.checkup_returned},
                                {"checkup_kept_out", w.checkup_kept},
                                {"healthy_out_days", w.healthy_out_days},
                                {"same_trace", w.trace_digest == f.trace_digest && w.trace_faults == f.trace_faults}};
  }
  if (timing) {
    out["speed"] = {{"cpu_s", r.cpu_seconds}, {"events_per_s", f.events / std::max(1e-9, r.cpu_seconds)}};
  }
  return out;
}

std::string RenderHtml(const SimConfig& c, const SimResult& r) {
  static const char* colors[] = {"#3a3", "#999", "#d33", "#e83", "#ec3", "#a4c", "#39d", "#666"};
  const auto& tl = r.fleet.timeline;
  const double width = 1000, wall = std::max(1.0, r.arms[0].wall);
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='1000' height='40'>";
  for (const auto& s : tl) {
    const double x = controller::ToMs(s.start) / 1000.0 / wall * width;
    const double w = std::max(0.5, (controller::ToMs(s.end) - controller::ToMs(s.start)) / 1000.0 / wall * width);
    svg << "<rect x='" << x << "' y='0' width='" << w << "' height='40' fill='" << colors[static_cast<int>(s.category)]
        << "'><title>" << TimeCategoryName(s.category) << " " << Hours((controller::ToMs(s.end) - controller::ToMs(s.start)) / 1000.0)
        << "</title></rect>";
  }
  svg << "</svg>";
  std::ostringstream h;
  h << "<!doctype html><html><head><meta charset='utf-8'><title>bulwark sim</title>"
       "<style>body{font-family:sans-serif;margin:2em}pre{background:#f6f6f6;padding:1em}</style></head><body>"
    << "<h1>bulwark sim: " << c.gpus << " GPUs, " << c.days << " days</h1>"
    << "<p>The bulwark arm's ledger over the run (green productive, red detection, orange localization, yellow "
       "recovery, purple recomputation, blue waiting, grey startup/manual); hover a segment.</p>"
    << svg.str() << "<pre>" << FormatText(c, r) << "</pre></body></html>\n";
  return h.str();
}

}  // namespace bulwark::sim
