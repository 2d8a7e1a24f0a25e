// PlaneOptions: what a Plane (plane.h) is opened with: its journal, the
// cluster's policy, and the timings and hooks of its liveness and actuation.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "cluster/backend.h"
#include "controller/policy_config.h"
#include "plane/address_check.h"
#include "plane/core.h"
#include "plane/journal_store.h"

namespace bulwark::cluster {
class Emulator;
}  // namespace bulwark::cluster

namespace bulwark::plane {

class JobJournals;

struct PlaneOptions {
  std::string db_path;
  bool create = true;
  // Opens the journal (journal_store.h) with `create`; null: the SQLite
  // Store at db_path. `bulwark controller --etcd` opens an EtcdJournal
  // fenced by this controller's term (journal_etcd.h, leader.h).
  std::function<Result<std::unique_ptr<JournalStore>>(bool create)> open_journal;
  // A fleet's named jobs' journals (job_journals.h); null: SQLite files
  // under the cluster's jobs directory. `bulwark up --ha` keeps them in
  // etcd beside open_journal's.
  std::shared_ptr<const JobJournals> job_journals;
  PolicyConfig policy;
  // An agent silent this long is lost. Agents report every 500 ms, so this
  // is four missed reports.
  Duration heartbeat_timeout = std::chrono::milliseconds(2000);
  // A silent machine whose peers saw its connections close (a FIN or RST:
  // its processes are gone, and its network carried the news) is lost
  // after this much silence even when heartbeat_timeout is longer: the
  // fencing lease (cluster/fence.h) is for a machine that may still run
  // cut off, and this one cannot.
  Duration closed_peer_timeout = std::chrono::milliseconds(2000);
  // After a (re)start an agent not yet heard from is judged lost only after
  // this long: the silence is the controller's own absence, and agents need
  // a moment to reconnect. Agents that did reconnect get heartbeat_timeout.
  Duration reconnect_grace = std::chrono::milliseconds(10000);
  // How often the server calls Tick. A gap between ticks much longer than
  // this is the controller's own stall (its disk under the journal's fsync,
  // a starved CPU), and agents' silence during it is not held against them:
  // a demo on a host loaded by a compile once evicted all six machines after
  // a 4.9 s stall.
  Duration tick_period = std::chrono::milliseconds(250);
  // A stack capture that asks at least this many machines crowds the
  // controller's sockets with their uploads, and its time is nobody's
  // silence (FinishTraceLocked). A smaller one does not crowd them, and a
  // machine that died just before it must be lost at its lease, not after:
  // a restart decided meanwhile still counts it live, and its peers' agents
  // block fetching their shards from it (a clean clone's suite lost healthy
  // machines that way when every capture got the credit). 12,500 agents
  // lost 4 healthy machines to a capture's flood; 4,000 lost none.
  size_t capture_crowds = 1000;
  // The cluster manager told of evictions, returns and standby shortfalls
  // (plane_backend.cc); null for the local backend.
  std::shared_ptr<cluster::Backend> backend;
  // The machines' emulated hardware, which `inject` breaks and `machine
  // return` mends (cluster/local/emulator.h); null: no fault of a part can
  // be injected.
  std::shared_ptr<cluster::Emulator> emulator;
  // What Register holds an agent's advertised address against
  // (address_check.h); the default checks nothing.
  AddressRules addresses;
  // A machine proves it can be reached before it joins the pool (issue 40):
  // with this set, a joining machine with an advertised address joins only
  // once the server's prober (ProbesDue, ProbeDone) reached it there, and a
  // standby is reached again every `reprobe_standby_every`. False (the
  // plane's own tests): a reporting machine joins at once.
  bool probe_reachability = false;
  Duration reprobe_standby_every = std::chrono::seconds(5);
  // One job of several on a fleet (fleet.h): the job waits for `count`
  // machines (a WaitForMachines it decided), and the fleet grants them from
  // its one pool. Called once the plane's lock is released. Null: the only
  // job, whose standbys are its own.
  std::function<void(int count, Time now)> wants_machines;
  // Begins each of its log lines ("job NAME: " for a fleet's job), so that
  // several jobs' lines in one log say whose they are.
  std::string log_prefix;
  // A fleet's job: its name, which a machine's drain reason carries (each
  // job numbers its incidents from 1, so "incident 3" alone is ambiguous).
  std::string job_name;
};

}  // namespace bulwark::plane
