#include "support/etcd_server.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/files.h"
#include "plane/etcd_client.h"
#include "plane/ha_controller.h"

namespace bulwark::testing {

namespace {

// Process execs a path, not a name: Debian's etcd-server installs here.
std::string EtcdBinary() {
  const char* env = std::getenv("BULWARK_ETCD");
  return env && *env ? env : "/usr/bin/etcd";
}

// The members' data goes to memory where it can: a raft election fsyncs
// each member's vote, and on the disk the whole suite writes to, what that
// costs is the suite's load, not bulwark's. These tests are of bulwark's
// side of etcd (a controller's 5 s lease must outlast an election).
// Memory is scarcer than disk: a test process killed before its destructor
// ran (a ctest timeout) leaves 64 MB of write-ahead log per member there,
// so each new server first removes the directories whose test is gone.
std::string MemoryTempDir() {
  std::error_code ignored;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ignored)) {
    if (e.path().filename().string().rfind("bulwark-etcd-", 0) != 0) continue;
    std::ifstream in(e.path() / "owner.pid");
    pid_t owner = 0;
    if (in >> owner && owner > 0) {
      if (::kill(owner, 0) == 0 || errno == EPERM) continue;
    } else {
      // No owner yet: another test between mkdtemp and writing it, unless old.
      const auto written = std::filesystem::last_write_time(e.path(), ignored);
      if (ignored || std::filesystem::file_time_type::clock::now() - written < std::chrono::minutes(10)) continue;
    }
    std::filesystem::remove_all(e.path(), ignored);
  }
  char tmpl[] = "/dev/shm/bulwark-etcd-XXXXXX";
  if (char* d = ::mkdtemp(tmpl)) {
    std::ofstream(std::string(d) + "/owner.pid") << ::getpid() << "\n";
    return d;
  }
  return MakeTempDir();
}

// A child of this process that has exited (not reaped: its Process waits).
bool Exited(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

}  // namespace

int FreePort() { return plane::FreeTcpPort(); }

std::unique_ptr<EtcdServer> EtcdServer::Start(std::string* why, int members, const std::string& host) {
  // A port is free when FreePort answers, not when etcd binds it: another
  // test may take it between the two, and then the member exits ("address
  // already in use") while the others answer, or its client port answers
  // for the other test's etcd. Such a cluster has a member fewer than it
  // says, and losing one more loses its quorum. Fresh ports, then.
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<EtcdServer> s(new EtcdServer());
    const std::string dir = MemoryTempDir();
    s->root_ = dir;
    s->members_.resize(static_cast<size_t>(members));
    for (int i = 0; i < members; ++i) {
      Member& m = s->members_[static_cast<size_t>(i)];
      m.name = "m" + std::to_string(i);
      m.dir = dir + "/" + m.name;
      m.client = host + ":" + std::to_string(FreePort());
      m.peer_url = "http://" + host + ":" + std::to_string(FreePort());
      s->initial_cluster_ += (i ? "," : "") + m.name + "=" + m.peer_url;
    }
    for (Member& m : s->members_) s->Launch(m, /*existing=*/false);
    bool up = true;
    for (const Member& m : s->members_) up = up && s->WaitAnswers(m, why);
    int exited = 0;
    for (const Member& m : s->members_) exited += m.process == nullptr || Exited(m.process->pid());
    if (up && exited == 0) return s;
    if (exited > 0) *why = std::to_string(exited) + " etcd member(s) exited at start (a port taken?)";
    if (attempt == 2) return nullptr;
  }
}

// The members go first, then their data: etcd preallocates 64 MB of
// write-ahead log per member, and 3,800 test runs' leftovers once filled
// this host's disk.
EtcdServer::~EtcdServer() {
  Thaw();
  members_.clear();
  std::error_code ignored;
  if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
}

std::string EtcdServer::endpoint() const {
  std::string out;
  for (const Member& m : members_) out += (out.empty() ? "" : ",") + m.client;
  return out;
}

void EtcdServer::Launch(Member& m, bool existing) {
  const std::string client_url = "http://" + m.client;
  m.process = std::make_unique<Process>(std::vector<std::string>{
      EtcdBinary(), "--name", m.name, "--data-dir", m.dir, "--listen-client-urls", client_url,
      "--advertise-client-urls", client_url, "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls",
      m.peer_url, "--initial-cluster", initial_cluster_, "--initial-cluster-state", existing ? "existing" : "new",
      "--pre-vote", "--log-level", "error"});
}

bool EtcdServer::WaitAnswers(const Member& m, std::string* why) const {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  Status last = Status::Unavailable("not tried");
  while (std::chrono::steady_clock::now() < until) {
    Result<std::unique_ptr<plane::EtcdClient>> c = plane::EtcdClient::Connect(m.client, std::chrono::milliseconds(500));
    if (c.ok()) return true;
    last = c.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  *why = "etcd member " + m.name + " at " + m.client + " did not answer within 20 s: " + last.message() +
         " (is etcd-server installed? scripts/install-deps.sh)";
  return false;
}

void EtcdServer::KillMember(int i) {
  Member& m = members_[static_cast<size_t>(i)];
  if (m.process) ::kill(m.process->pid(), SIGKILL);
  m.process.reset();
}

void EtcdServer::Kill() {
  for (int i = 0; i < size(); ++i) KillMember(i);
}

bool EtcdServer::RestartMember(int i, std::string* why) {
  KillMember(i);
  Member& m = members_[static_cast<size_t>(i)];
  Launch(m, /*existing=*/true);
  return WaitAnswers(m, why);
}

bool EtcdServer::Restart(std::string* why) {
  Kill();
  for (Member& m : members_) Launch(m, /*existing=*/true);
  for (const Member& m : members_) {
    if (!WaitAnswers(m, why)) return false;
  }
  return true;
}

namespace {

// Whether every thread of `pid` is stopped ('T' in /proc/PID/task/*/stat).
bool AllThreadsStopped(pid_t pid) {
  std::error_code ec;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    const char state = ProcessState(static_cast<pid_t>(std::atol(t.path().filename().c_str())));
    if (state != 0 && state != 'T' && state != 't') return false;
  }
  return !ec;
}

}  // namespace

// kill() returns before the signal has stopped every thread: a write sent
// right after could still be answered (etcd on /dev/shm answers within a
// millisecond: one was, in a full suite). Returns once all are stopped.
void EtcdServer::Freeze() {
  for (Member& m : members_) {
    if (m.process) ::kill(m.process->pid(), SIGSTOP);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (Member& m : members_) {
    while (m.process && !AllThreadsStopped(m.process->pid()) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

void EtcdServer::Thaw() {
  for (Member& m : members_) {
    if (m.process) ::kill(m.process->pid(), SIGCONT);
  }
}

}  // namespace bulwark::testing
