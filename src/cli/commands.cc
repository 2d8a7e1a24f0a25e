#include "cli/commands.h"

#include <CLI/CLI.hpp>

#include <algorithm>

#include "common/suggest.h"

namespace bulwark::cli {
namespace {

// A flag: its name without dashes, the label of its value ("" for a boolean
// flag, which takes none) and one line of help.
struct Flag {
  const char* name;
  const char* value;
  const char* help;
};

struct Command {
  const char* name;
  const char* summary;
  // Positionals in order: label and help.
  std::vector<std::pair<const char*, const char*>> positionals;
  std::vector<Flag> flags;
};

const std::vector<Flag> kLadder = {
    {"ladder-rungs", "LIST", "stop-time ladder rungs: diagnose,reattempt,rollback,replay or none (docs/ladder.md)"},
    {"ladder-tests", "LIST", "diagnostic tests: compute,device,network,alignment"},
    {"ladder-budget", "SECONDS", "time the ladder may take before it evicts"},
    {"ladder-align-every", "SECONDS", "bitwise alignment check period"},
    {"failure-rate", "P", "daily failure probability per machine the standby target is sized for"},
};

// The policy's thresholds from a file (controller/policy_fields.h).
const Flag kPolicy = {"policy", "FILE",
                      "YAML or JSON of policy fields, e.g. {slow_round: 10, hang_factor: 5} (docs/control-plane.md)"};

// The flags the demo and the benchmarks share (run_commands.cc).
const std::vector<Flag> kRun = {
    {"out", "DIR", "where the report and the cluster go"},
    {"data", "DIR", "prepared corpus (bulwark-train prepare)"},
    {"config", "NAME", "the trainer's --config: tiny, small or a file"},
    {"threads", "N", "trainer threads per rank"},
};

std::vector<Flag> Plus(std::vector<Flag> a, const std::vector<Flag>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<Command>& Commands() {
  static const Flag kJson = {"json", "", "print JSON instead of text"};
  static const std::vector<Command> commands = {
      {"up",
       "start a cluster: the controller and N+S agents (local, or in a Slurm allocation)",
       {},
       Plus({{"machines", "N", "machines for jobs (required for --backend local; Slurm: the allocation's less S)"},
             {"standby", "S", "warm standby machines [0]"},
             {"backend", "NAME", "local (agents as processes on this host) or slurm (docs/slurm.md) [local]"},
             {"grow", "G", "slurm: G more nodes as jobs of their own"},
             {"listen", "HOST", "slurm: the address the nodes reach the controller at"},
             {"tls", "", "mutual TLS between the controller, agents and this CLI (a fresh CA)"},
             {"ha", "", "3 etcd members and 2 controllers; the leader serves (docs/control-plane.md)"},
             {"metrics-port", "P", "the controller's Prometheus /metrics on 127.0.0.1:P [any free port]"},
             {"signatures", "FILE", "the agents' log signature table instead of the built-in one"},
             {"nics", "A,B,..", "local: each machine's network interface, watched through the kernel [emulated links]"},
             {"netns", "", "local: each machine in a network namespace of its own, on a bridge (real links) [the default as root]"},
             {"no-netns", "", "local: the machines share this host's network (emulated link faults) [BULWARK_NETNS=off]"},
             {"fence-timeout", "S", "an agent cut off from the controller this long stops its ranks [3 in namespaces, else 0: off]"},
             {"racks", "K", "local, namespaces: K racks r0..rK-1, a bridge each under a spine; the job's machines in blocks, standbys one a rack in turn [none]"},
             kPolicy},
            kLadder)},
      {"down", "stop the cluster: agents (and their ranks), then the controller", {}, {}},
      {"run",
       "up, submit the command after --, follow it to its end, down: bulwark run --machines N -- python train.py",
       {},
       {{"machines", "N", "machines for the job, one rank each (required locally; Slurm: the allocation's less S)"},
        {"standby", "S", "warm standby machines [0]"},
        {"backend", "NAME", "local or slurm (docs/slurm.md) [slurm inside an allocation (SLURM_JOB_ID), else local]"},
        {"listen", "HOST", "slurm: the address the nodes reach the controller at [this host's name]"},
        {"grow", "G", "slurm: G more nodes as jobs of their own"},
        {"ranks-per-machine", "R", "ranks per machine [1]"},
        {"progress", "REGEX", "read steps from the ranks' output, e.g. 'step (?P<step>\\d+) loss (?P<loss>\\S+)'"},
        {"name", "NAME", "the job's name [run]"},
        {"recovery", "MODE", "standby (the whole-world restart), elastic (survivors train on: bulwark-train, or a "
                             "script that uses bulwark.elastic) or requeue [standby]"},
        kPolicy,
        kJson}},
      {"submit",
       "run a job",
       {{"JOB.yaml", "fields: name, world_size, ranks_per_machine, command, args, env, checkpoint, parallel"}},
       {{"job", "NAME", "one job of several on the fleet, named NAME: it takes only the machines it needs, "
                        "and replacements from the fleet's one pool (docs/control-plane.md)"}}},
      {"update",
       "the running job's next release, at its next restart or --now (docs/recovery.md)",
       {{"JOB.yaml", "the job file of the new release"}},
       {{"now", "", "restart in place now"}, {"why", "TEXT", "the reason, kept with the release"},
        {"job", "NAME", "the job of the fleet, whose name the release takes [the first]"}}},
      {"rollback",
       "back to an earlier release",
       {},
       {{"to", "N", "release number [the one before the running one]"}, {"why", "TEXT", "the reason"},
        {"job", "NAME", "the job of the fleet [the first]"}}},
      {"releases", "the job's releases: who made them, when and why", {},
       {{"job", "NAME", "the job of the fleet [the first]"}, kJson}},
      {"status", "the job and every machine", {}, {kJson}},
      {"incidents", "every incident: detection, localization, recovery, ladder", {},
       {{"job", "NAME", "the job of the fleet [the first]"}, kJson}},
      {"ledger", "the job's ETTR ledger: where the wall time went", {},
       {{"job", "NAME", "the job of the fleet [the first]"}, kJson}},
      {"inject",
       "inject a fault into the running job or a machine (drills, tests)",
       {{"KIND", "crash, kill, machine-down, device-fail, nic-flap, corrupt-shard, nan, loss-spike, hang, slow, "
                 "slow-link, sdc, compute-fail, freeze, thaw; with --netns also partition and heal; with --racks "
                 "also switch-down, switch-up, switch-flap"}},
       {{"machine", "ID", "the machine (required but for switch-*)"},
        {"rack", "R", "switch-down, switch-up, switch-flap: the rack (r0, r1, ...)"},
        {"rank", "R", "one rank of the machine [all]"},
        {"where", "WHERE", "hang: collective or compute"},
        {"factor", "F", "slow, slow-link: F x slower (F > 1)"},
        {"mode", "MODE", "sdc: nan or drift"},
        {"rate", "R", "sdc: probability a matmul is corrupted, in (0, 1]"},
        {"for", "S", "freeze [until thaw]; netns: nic-flap's link down [2], partition's cut [until heal], switch-flap's "
                     "uplink down [2], switch-down's [until switch-up]; the command waits it out"}}},
      {"machine",
       "hand a repaired machine back: machine return --machine ID",
       {{"ACTION", "return"}},
       {{"machine", "ID", "the machine (required)"}}},
      {"demo",
       "the main demo: 4 machines + 2 standby train through every fault class",
       {},
       Plus({kJson,
             {"steps", "N", "training steps"},
             {"batch-size", "B", "sequences per rank per step"},
             {"ckpt-every", "N", "durable checkpoint period in steps"},
             {"machines", "N", "machines for the job (4 or more)"},
             {"standby", "S", "standby machines (the schedule needs 2)"},
             {"gap", "N", "steps between faults"}},
            kRun)},
      {"sim",
       "the policy on a simulated fleet (docs/simulator.md)",
       {},
       {{"gpus", "N", "GPUs in the fleet [9600]"},
        {"days", "D", "simulated days [90]"},
        {"seed", "S", "random seed"},
        {"config", "FILE", "sim.yaml or sim.json; flags win over it"},
        {"policy", "FILE", "a cluster's policy file (bulwark up --policy): its fields over the config's policy"},
        kJson,
        {"report", "DIR", "write sim-report.html and sim-report.json there"},
        {"sweep", "WHAT", "scale, standby, ckpt or detect"},
        {"replay", "NAME", "demo: the demo's fault schedule"},
        {"elastic", "", "recovery elastic (the default where the layout allows it): survivors keep their state"},
        {"no-elastic", "", "the whole-world restart at every fault (recovery standby)"},
        {"recovery", "MODE", "auto, elastic or standby (the whole-world restart) [auto]"},
        {"rendezvous", "PATH", "neighbours (plans in the start command, as built for elastic ring jobs) or store (every rank through one store) [neighbours]"},
        {"no-compare", "", "elastic: skip the whole-world run on the same fault trace (half the CPU)"},
        {"regroup", "S", "elastic: an ASSUMED regroup in seconds instead of the priced one (flagged)"},
        {"correlated", "", "failure domains: racks of 2 machines (Llama 3), switch faults, infant mortality"},
        {"racks", "R", "failure domains with R machines under each switch (turns them on)"},
        {"placement", "P", "with racks: aware (a replica's stages under one switch) or blind [aware]"},
        {"checkup", "", "over-evicted machines are checked off the job's path and return to the pool [on]"},
        {"no-checkup", "", "over-evicted machines stay out for good (as before checkups)"}}},
      {"bench-recovery",
       "detect/recover medians per fault class (tiny model)",
       {},
       Plus({{"repeat", "N", "runs per fault class [3]"}}, kRun)},
      {"bench-checkpoint",
       "in-memory checkpoint overhead and restore times",
       {},
       Plus({{"rounds", "N", "rounds [2]"},
             {"steps", "N", "steps per run"},
             {"warmup", "N", "steps left out of the timing"},
             {"persist-every", "N", "durable checkpoint period in steps"},
             {"shard-optimizer", "", "ZeRO-1 optimizer state"}},
            kRun)},
      {"bench-compare",
       "bulwark against the requeue baseline (docs/recovery.md)",
       {},
       Plus({{"repeat", "N", "runs per fault class [2]"},
             {"provisioning-delay", "SECONDS", "the baseline's wait for a replacement machine [600]"},
             {"persist-every", "N", "durable checkpoint period in steps"}},
            kRun)},
      {"bench-implicit",
       "detect/localize/recover medians per implicit fault class",
       {},
       Plus({{"repeat", "N", "runs per fault class [3]"}}, kRun)},
      {"bench-ladder",
       "time per ladder rung and share of faults per rung (bench/ladder)",
       {},
       Plus({{"repeat", "N", "runs [1]"}}, kRun)},
      {"bench-plane",
       "the real controller under N simulated agents over gRPC (docs/control-plane.md)",
       {},
       {{"agents", "N", "simulated agents, one per machine [100]"},
        {"jobs", "J", "J named jobs of (N - 1) / J machines each; the rest the fleet's pool [1]"},
        {"seconds", "S", "the steady window measured [30]"},
        {"channels", "C", "gRPC connections the agents share [one per 200]"},
        {"out", "DIR", "the bench's cluster directory, emptied first [/tmp/bulwark-plane-bench]"},
        kJson}},
      {"controller",
       "the controller process (started by up)",
       {},
       Plus({{"init", "", "a fresh cluster: create the database"},
             {"metrics-port", "P", "Prometheus /metrics on 127.0.0.1:P"},
             {"etcd", "ENDPOINTS", "keep the journal in etcd (host:port,...) and lead by its lease (docs/control-plane.md)"},
             {"etcd-prefix", "KEY", "the cluster's keys in etcd [/bulwark/]"},
             {"etcd-lease", "SECONDS", "the leader lease's TTL [5]"},
             {"controller-id", "ID", "this controller's name in the leader key [hostname:pid]"},
             {"cluster-dir", "DIR", "with --etcd: the leader writes its address to DIR/controller.addr for agents and the CLI"}},
            kLadder)},
      {"agent",
       "one machine's agent process (started by up)",
       {},
       {{"machine", "ID", "this machine's id"},
        {"metrics-port", "P", "Prometheus /metrics on 127.0.0.1:P"},
        {"signatures", "FILE", "log signature table instead of the built-in one"},
        {"nic", "IFACE", "this machine's network interface, watched through the kernel [an emulated link]"},
        {"address", "IP", "this machine's own address: shards, metrics and rendezvous listen there [127.0.0.1]"},
        {"domain", "NAME", "this machine's failure domain, the rack whose switch it hangs under (e.g. r1) [none]"},
        {"controller", "A,B,..", "every controller's host:port; the agent finds the leader [DIR/controllers.addr, else DIR/controller.addr]"}}},
  };
  return commands;
}

std::string Hint(const std::string& command) {
  return command.empty() ? " (run 'bulwark --help')" : " (run 'bulwark " + command + " --help')";
}

// The App for every command, each option's values kept by CLI11 until
// ParseCommandLine reads them back into Args.
void BuildApp(CLI::App& app) {
  app.name("bulwark");
  app.description(
      "bulwark: the control plane of robust LLM training (controller, agents, CLI).\n"
      "Every command takes --dir D: the cluster directory (default $BULWARK_DIR, else ./.bulwark).");
  app.allow_extras();  // ParseCommandLine reports what is left, with the nearest name
  app.require_subcommand(0, 1);
  app.get_formatter()->column_width(32);
  app.get_formatter()->label("SUBCOMMAND", "COMMAND");
  for (const Command& c : Commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary)->group("Commands");
    sub->allow_extras();
    for (const auto& [label, help] : c.positionals) sub->add_option(label, help);
    std::vector<Flag> flags = c.flags;
    flags.push_back({"dir", "D", "the cluster directory [$BULWARK_DIR, else ./.bulwark]"});
    for (const Flag& f : flags) {
      CLI::Option* o = *f.value ? sub->add_option(std::string("--") + f.name, f.help)->type_name(f.value)
                                : sub->add_flag(std::string("--") + f.name, f.help);
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
    }
  }
  app.footer("'bulwark COMMAND --help' lists a command's flags.");  // after the commands: theirs has none
}

std::vector<std::string> CommandNames() {
  std::vector<std::string> names;
  for (const Command& c : Commands()) names.push_back(c.name);
  return names;
}

Status UnknownFlag(const std::string& command, const std::string& arg, const CLI::App& sub) {
  std::string flag = arg.substr(0, arg.find('='));
  flag = flag.substr(flag.find_first_not_of('-'));
  std::vector<std::string> names;
  for (const CLI::Option* o : sub.get_options()) {
    if (!o->get_lnames().empty()) names.push_back(o->get_lnames()[0]);
  }
  const std::string best = Nearest(flag, names);
  return Status::InvalidArgument(command + ": unknown flag '--" + flag + "'" +
                                 (best.empty() ? "" : "; did you mean '--" + best + "'?") + Hint(command));
}

}  // namespace

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  // `run`'s command: every word after the first "--", passed on untouched.
  std::vector<std::string> command;
  if (auto dashes = std::find(args.begin(), args.end(), "--"); dashes != args.end()) {
    command.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
  }
  // `bulwark help [COMMAND]` is `bulwark [COMMAND] --help`.
  if (!args.empty() && args[0] == "help") {
    args.erase(args.begin());
    args.push_back("--help");
  }
  CLI::App app;
  BuildApp(app);
  CommandLine out;
  auto current = [&app]() -> std::string {
    const std::vector<CLI::App*> subs = app.get_subcommands();
    return subs.empty() ? "" : subs[0]->get_name();
  };
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out.help = app.help();  // the command's own help when one was named
    return out;
  } catch (const CLI::ArgumentMismatch& e) {
    // "--machines: 1 required N missing": the flag ended the line.
    const std::string what = e.what();
    const std::string cmd = current();
    return Status::InvalidArgument((cmd.empty() ? "" : cmd + ": ") + what.substr(0, what.find(':')) +
                                   " needs a value" + Hint(cmd));
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(std::string(e.what()) + Hint(current()));
  }
  // Words no command claimed: an unknown command (or flag before one).
  for (const std::string& extra : app.remaining()) {
    if (extra.rfind("-", 0) == 0) {
      const std::string flag = extra.substr(0, extra.find('='));
      const std::string cmd = current().empty() ? "COMMAND" : current();
      return Status::InvalidArgument("'" + flag + "' before the command: flags follow it ('bulwark " + cmd + " " +
                                     flag + " ...')" + Hint(current()));
    }
    const std::string best = Nearest(extra, CommandNames());
    return Status::InvalidArgument("unknown command '" + extra + "'" +
                                   (best.empty() ? "" : "; did you mean '" + best + "'?") + Hint(""));
  }
  const std::vector<CLI::App*> subs = app.get_subcommands();
  if (subs.empty()) {
    out.help = app.help();
    return out;
  }
  const CLI::App& sub = *subs[0];
  const std::string cmd = sub.get_name();
  for (const std::string& extra : sub.remaining()) {
    if (extra.rfind("-", 0) == 0) return UnknownFlag(cmd, extra, sub);
    return Status::InvalidArgument(cmd + ": unexpected argument '" + extra + "'" + Hint(cmd));
  }
  out.args.positional.push_back(cmd);
  if (!command.empty() && cmd != "run") {
    return Status::InvalidArgument(cmd + ": unexpected '--' and command (only 'run' takes one)" + Hint(cmd));
  }
  out.args.positional.insert(out.args.positional.end(), command.begin(), command.end());
  for (const CLI::Option* o : sub.get_options()) {
    if (o->count() == 0) continue;
    if (o->get_positional() && o->get_lnames().empty()) {
      out.args.positional.push_back(o->results().back());
    } else if (!o->get_lnames().empty() && o->get_lnames()[0] != "help") {
      // A boolean flag's presence is what counts (Args::Has).
      out.args.flags[o->get_lnames()[0]] = o->get_expected_max() == 0 ? "" : o->results().back();
    }
  }
  return out;
}

}  // namespace bulwark::cli
