// The agent's end of the rank link (client/rank_link.h): accepts the ranks'
// connections, reads their step reports on a thread of its own (a step must
// never wait for the agent), and sends them test hooks.
//
// SignalSum turns the per-step reports into what the heartbeat carries: per
// rank, one sum of the ordinary steps since the last report, and every
// anomalous step on its own, so that a NaN is never averaged away.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bulwark.pb.h"
#include "rank_client/rank_link.h"
#include "common/mutex.h"
#include "common/status.h"

namespace bulwark::agent {

class RankLinkServer {
 public:
  static Result<std::unique_ptr<RankLinkServer>> Start(const std::string& path,
                                                      std::function<void(const std::string&)> log);
  ~RankLinkServer();

  struct Message {
    int rank = -1;
    pid_t pid = 0;
    std::string text;
  };
  // Messages received since the last call, in arrival order.
  std::vector<Message> Take();
  // Sends `text` to the newest link of the process `pid`; NotFound when it
  // has none (a program that does not speak the rank link).
  Status Send(pid_t pid, const std::string& text);
  const std::string& path() const { return path_; }

 private:
  RankLinkServer() = default;
  void Loop();

  std::string path_;
  int listen_ = -1;
  std::function<void(const std::string&)> log_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  Mutex mu_;
  struct Conn {
    bool hello = false;
    int rank = -1;  // -1: a spare (pre-spawned) process
    pid_t pid = 0;
  };
  std::map<int, Conn> conns_ GUARDED_BY(mu_);  // by socket
  std::vector<Message> inbox_ GUARDED_BY(mu_);
};

class SignalSum {
 public:
  // A STEP or PHASE message of `rank` from generation `generation`.
  void Add(int rank, int64_t generation, const std::string& text);
  // True when an anomalous step waits: report at once.
  bool urgent() const { return urgent_; }
  // Everything since the last call, in the order each rank said it.
  std::vector<wire::RankSignal> Take();

 private:
  void Flush(int rank);  // the rank's running sum joins the ordered list
  std::map<int, wire::RankSignal> sums_;  // ordinary steps, by rank
  std::vector<wire::RankSignal> singles_;  // flushed sums, anomalies and phases, in order
  bool urgent_ = false;
};

}  // namespace bulwark::agent
