#include "support/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/leftovers.h"

extern char** environ;

namespace bulwark::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

std::string ProcessResult::LastLine() const {
  size_t end = out.find_last_not_of("\n");
  if (end == std::string::npos) return "";
  size_t start = out.find_last_of('\n', end);
  return out.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

Process::Process(std::vector<std::string> argv, std::map<std::string, std::string> env) {
  // Tagged, so that it and what it starts die with this test (leftovers.h).
  env.emplace(kOwnerVariable, LeftoversTag());
  std::string dir = MakeTempDir();
  out_path_ = dir + "/stdout";
  err_path_ = dir + "/stderr";
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) envs.push_back(kv);
  }
  for (auto& [k, v] : env) envs.push_back(k + "=" + v);
  // bulwark-train re-executes itself to set this (main.cc), loading its
  // ~290 libraries twice: 0.7 s of every trainer a test starts, here.
  if (!env.count("OMP_WAIT_POLICY") && !std::getenv("OMP_WAIT_POLICY")) envs.push_back("OMP_WAIT_POLICY=PASSIVE");
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    int o = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<char*> av, ev;
    for (auto& a : argv) av.push_back(a.data());
    av.push_back(nullptr);
    for (auto& x : envs) ev.push_back(x.data());
    ev.push_back(nullptr);
    ::execve(av[0], av.data(), ev.data());
    ::_exit(127);
  }
}

Process::~Process() {
  if (!waited_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  // What it printed was read into its result (Wait) or is not wanted: the
  // capture directory goes, or every test run leaves one per process in /tmp.
  std::error_code ignored;
  std::filesystem::remove_all(out_path_.substr(0, out_path_.rfind('/')), ignored);
}

ProcessResult Process::Wait(double timeout_s) {
  ProcessResult r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid_, &status, WNOHANG);
    if (w == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  waited_ = true;
  if (WIFEXITED(status) && !r.timed_out) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = Slurp(out_path_);
  r.err = Slurp(err_path_);
  std::string dir = out_path_.substr(0, out_path_.rfind('/'));
  ::unlink(out_path_.c_str());
  ::unlink(err_path_.c_str());
  ::rmdir(dir.c_str());
  return r;
}

std::string Process::OutputSoFar() const { return Slurp(out_path_); }

bool Process::WaitForOutput(const std::string& needle, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (OutputSoFar().find(needle) != std::string::npos) return true;
    siginfo_t info{};
    // Peek without reaping, so Wait() still collects the exit status.
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string BinDir() { return BULWARK_BIN_DIR; }

namespace {
std::mutex made_mu;
std::vector<std::string>* made = nullptr;  // never freed: read at exit

// At exit, after a run whose every test passed: a failed one keeps its
// directories to read. (Each full suite left ~3,000 here before.)
void RemoveMadeDirs() {
  std::lock_guard<std::mutex> lock(made_mu);
  if (made == nullptr || !::testing::UnitTest::GetInstance()->Passed()) return;
  for (const std::string& d : *made) {
    std::error_code ignored;
    std::filesystem::remove_all(d, ignored);
  }
}
}  // namespace

std::string MakeTempDir() {
  char tmpl[] = "/tmp/bulwark-test-XXXXXX";
  char* d = ::mkdtemp(tmpl);
  if (!d) throw std::runtime_error("mkdtemp failed");
  std::lock_guard<std::mutex> lock(made_mu);
  if (made == nullptr) {
    made = new std::vector<std::string>();
    std::atexit(RemoveMadeDirs);
  }
  made->push_back(d);
  return d;
}

std::string PreparedCorpus(const std::vector<std::string>& args) {
  std::string name = "kjv";
  for (const std::string& a : args) name += (a.rfind("--", 0) == 0 ? "_" + a.substr(2) : "-" + a);
  const std::string root = BinDir() + "/../test-data", dir = root + "/" + name;
  ::mkdir(root.c_str(), 0755);
  // One preparer at a time; the others wait for it and reuse its output.
  const int lock = ::open((root + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    ADD_FAILURE() << "cannot lock " << root << "/.lock: " << std::strerror(errno);
    return dir;
  }
  struct stat st{};
  if (::stat((dir + "/tokenizer.model").c_str(), &st) != 0) {
    // prepare writes beside `dir` and renames it in place when complete.
    std::vector<std::string> argv = {BinDir() + "/bulwark-train", "prepare", "--corpus", "kjv", "--out", dir, "--quiet"};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessResult r = Run(argv, {}, 300);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  ::close(lock);
  return dir;
}

std::vector<std::unique_ptr<Process>> StartRanks(const std::vector<std::string>& argv, int world,
                                                 const std::map<std::string, std::string>& env, double announce_s) {
  auto rank_env = [&](int r, const std::string& port) {
    std::map<std::string, std::string> e = env;
    e.insert({{"RANK", std::to_string(r)}, {"LOCAL_RANK", std::to_string(r)}, {"WORLD_SIZE", std::to_string(world)},
              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
    return e;
  };
  std::vector<std::unique_ptr<Process>> procs;
  procs.push_back(std::make_unique<Process>(argv, rank_env(0, "0")));
  if (world == 1) return procs;
  const std::string needle = "{\"event\":\"rendezvous\",\"port\":";
  if (!procs[0]->WaitForOutput(needle, announce_s)) return procs;
  const std::string out = procs[0]->OutputSoFar();
  const std::string port = std::to_string(std::atoi(out.c_str() + out.find(needle) + needle.size()));
  for (int r = 1; r < world; ++r) procs.push_back(std::make_unique<Process>(argv, rank_env(r, port)));
  return procs;
}

}  // namespace bulwark::testing
