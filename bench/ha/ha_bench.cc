// The HA controller's figures (issue 37), on real etcd members this bench
// starts (one unless --members N): journal appends per second through etcd and SQLite, the failover
// time from a leader's loss to its successor's first decision, and the time
// a successor needs to catch up (read and replay the journal).
//
//   cmake --build build --target bulwark-ha-bench
//   build/bin/bulwark-ha-bench [--rows N] [--steps S] [--lease SECONDS] [--cold 1] [--members N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "plane/journal_etcd.h"
#include "plane/journal_etcd_mirror.h"
#include "plane/leader.h"
#include "plane/plane.h"
#include "plane/store.h"
#include "support/agent_messages.h"
#include "support/etcd_server.h"
#include "support/plane_commands.h"

namespace bulwark::plane {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

int Fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "ha-bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

// Appends `rows` records of a step report's size; appends per second.
Result<double> AppendRate(JournalStore& store, int rows) {
  const std::string record = R"({"type":"event","event":{"kind":"step","step":123456,"observed_ms":1700000000000}})";
  const auto start = Clock::now();
  for (int i = 0; i < rows; ++i) BULWARK_RETURN_IF_ERROR(store.Append("bench", i, record));
  return rows / (Ms(start, Clock::now()) / 1000.0);
}

PlaneOptions EtcdOptions(std::shared_ptr<const EtcdClient> etcd, const std::string& prefix, const Term& term,
                         std::shared_ptr<const EtcdMirror> mirror = nullptr) {
  PlaneOptions o;
  o.open_journal = [etcd, prefix, term, mirror](bool create) -> Result<std::unique_ptr<JournalStore>> {
    auto j = EtcdJournal::Open(etcd, prefix, term, create, mirror);
    if (!j.ok()) return j.status();
    return std::unique_ptr<JournalStore>(std::move(*j));
  };
  return o;
}

int Main(int argc, char** argv) {
  int rows = 2000, steps = 2000, lease_s = 3, cold = 0, members = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) rows = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--lease")) lease_s = std::atoi(argv[i + 1]);
    // --cold 1: b takes over without its mirror, reading the journal from etcd.
    if (!std::strcmp(argv[i], "--cold")) cold = std::atoi(argv[i + 1]);
    // --members 3: every write goes through etcd's raft to a quorum, as under up --ha.
    if (!std::strcmp(argv[i], "--members")) members = std::atoi(argv[i + 1]);
  }
  std::string why;
  auto server = testing::EtcdServer::Start(&why, members);
  if (!server) return Fail("starting etcd", Status::Unavailable(why));
  auto connected = EtcdClient::Connect(server->endpoint(), std::chrono::milliseconds(2000));
  if (!connected.ok()) return Fail("connecting", connected.status());
  std::shared_ptr<const EtcdClient> etcd = std::move(*connected);
  const std::atomic<bool> never{false};
  auto quiet = [](const std::string&) {};

  // --- journal appends, one transaction each, as the plane writes them ---
  auto sqlite = Store::Open(testing::MakeTempDir() + "/c.db", true);
  if (!sqlite.ok()) return Fail("sqlite", sqlite.status());
  auto lead0 = Leadership::Campaign(*etcd, "/bench/rate/", "rate", lease_s, never, quiet);
  if (!lead0.ok()) return Fail("campaign", lead0.status());
  auto ej = EtcdJournal::Open(etcd, "/bench/rate/", (*lead0)->term(), true);
  if (!ej.ok()) return Fail("etcd journal", ej.status());
  Result<double> s_rate = AppendRate(**sqlite, rows);
  Result<double> e_rate = AppendRate(**ej, rows);
  if (!s_rate.ok() || !e_rate.ok()) return Fail("appending", s_rate.ok() ? e_rate.status() : s_rate.status());
  std::printf("journal appends/s (%d rows, one at a time): sqlite %.0f (WAL, synchronous=FULL), etcd %.0f "
              "(%d member%s, fenced txn each)\n",
              rows, *s_rate, *e_rate, members, members == 1 ? "" : "s");

  // --- a leader trains a job, then is cut off ---
  const std::string prefix = "/bench/ha/";
  auto a = Leadership::Campaign(*etcd, prefix, "a", lease_s, never, quiet);
  if (!a.ok()) return Fail("campaign a", a.status());
  auto pa = Plane::Open(EtcdOptions(etcd, prefix, (*a)->term()), TimeFromMs(1000));
  if (!pa.ok()) return Fail("plane a", pa.status());
  for (const char* m : {"m01", "m02", "m03"}) {
    if (Status st = (*pa)->Register(testing::Reg(m), TimeFromMs(1000)); !st.ok()) return Fail("register", st);
  }
  if (auto id = (*pa)->Submit(testing::Launch(), TimeFromMs(1100)); !id.ok()) return Fail("submit", id.status());
  // b stands by from the start, following the journal as a writes it.
  auto standby = EtcdMirror::Start(etcd, prefix);
  if (!standby.ok()) return Fail("b's mirror", standby.status());
  std::shared_ptr<const EtcdMirror> mirror = std::move(*standby);
  int64_t t = 2000;
  for (int s = 1; s <= steps; ++s, t += 100) {
    auto acked = (*pa)->Report(testing::Report("m01", {testing::Step(s, s, 1, t)}), TimeFromMs(t));
    if (!acked.ok()) return Fail("step report", acked.status());
  }
  (*a)->Abandon();  // no more renewals: a machine gone or partitioned away
  const auto lost = Clock::now();
  auto b = Leadership::Campaign(*etcd, prefix, "b", lease_s, never, quiet);
  if (!b.ok()) return Fail("campaign b", b.status());
  const auto led = Clock::now();
  PlaneOptions ob = EtcdOptions(etcd, prefix, (*b)->term(), cold ? nullptr : mirror);
  ob.create = false;
  auto pb = Plane::Open(ob, TimeFromMs(t));
  if (!pb.ok()) return Fail("plane b", pb.status());
  const auto caught_up = Clock::now();
  // The agents find the new leader and register again, as after any
  // controller restart; then one reports a fault.
  for (const char* m : {"m01", "m02", "m03"}) {
    if (Status st = (*pb)->Register(testing::Reg(m), TimeFromMs(t)); !st.ok()) return Fail("register again", st);
  }
  auto acked = (*pb)->Report(testing::Report("m02", {testing::DeviceFailed(1, t)}), TimeFromMs(t));
  if (!acked.ok()) return Fail("fault report", acked.status());
  const auto decided = Clock::now();
  if ((*pb)->IncidentsJson().size() != 1) return Fail("b's decision", Status::Internal("no incident opened"));
  auto rows_now = EtcdJournal::Open(etcd, prefix, (*b)->term(), false);
  const size_t replayed = rows_now.ok() ? (*(*rows_now)->Journal("demo")).size() : 0;
  std::printf("failover (lease %d s renewed every %d ms, %d steps trained): new leader %.0f ms after the old one "
              "stopped renewing; caught up (replayed %zu journal rows, read from %s) in %.0f ms; agents registered and first decision (evict m02) %.0f ms later; %.0f ms in "
              "all\n",
              lease_s, static_cast<int>((*a)->RenewPeriodMs()), steps, Ms(lost, led), replayed,
              cold ? "etcd (--cold)"
                   : ("b's mirror, " + std::to_string(mirror->applied()) + " changes applied as written").c_str(),
              Ms(led, caught_up), Ms(caught_up, decided), Ms(lost, decided));
  // The same catch-up again, alone, with and without the mirror: what the
  // standby's watch saves is the read of every row from etcd.
  for (bool warm : {true, false}) {
    PlaneOptions oc = EtcdOptions(etcd, prefix, (*b)->term(), warm ? mirror : nullptr);
    oc.create = false;
    const auto again = Clock::now();
    auto pc = Plane::Open(oc, TimeFromMs(t + 100));
    if (!pc.ok()) return Fail("plane c", pc.status());
    std::printf("catch-up alone, %s: %.0f ms for %zu rows\n", warm ? "from the mirror" : "read from etcd",
                Ms(again, Clock::now()), replayed + 1);
  }
  return 0;
}

}  // namespace
}  // namespace bulwark::plane

int main(int argc, char** argv) { return bulwark::plane::Main(argc, argv); }
