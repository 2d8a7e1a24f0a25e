#include "agent/rank_link_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "rank_client/shard_socket.h"

namespace bulwark::agent {

Result<std::unique_ptr<RankLinkServer>> RankLinkServer::Start(const std::string& path,
                                                             std::function<void(const std::string&)> log) {
  Result<int> fd = rank_client::ListenShardSocket(path);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<RankLinkServer> s(new RankLinkServer());
  s->path_ = path;
  s->listen_ = *fd;
  s->log_ = std::move(log);
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

RankLinkServer::~RankLinkServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (auto& [fd, c] : conns_) ::close(fd);
  if (listen_ >= 0) ::close(listen_);
}

void RankLinkServer::Loop() {
  while (!stop_) {
    std::vector<pollfd> fds{{listen_, POLLIN, 0}};
    {
      MutexLock lock(&mu_);
      for (const auto& [fd, c] : conns_) fds.push_back({fd, POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        MutexLock lock(&mu_);
        conns_[c] = Conn{};
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[512];
      ssize_t n = ::recv(fds[i].fd, buf, sizeof buf - 1, MSG_DONTWAIT);
      MutexLock lock(&mu_);
      if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          ::close(fds[i].fd);
          conns_.erase(fds[i].fd);
        }
        continue;
      }
      std::string text(buf, n);
      Conn& c = conns_[fds[i].fd];
      std::vector<std::string> w = rank_client::SplitWords(text);
      if (w.size() == 3 && w[0] == "HELLO") {
        c.hello = true;
        c.rank = std::atoi(w[1].c_str());
        c.pid = static_cast<pid_t>(std::atoi(w[2].c_str()));
        // The controller's hang detector judges only ranks that report; a
        // spare (rank -1) is no rank yet. A process that took a rank says
        // HELLO again: a new start.
        if (c.rank >= 0) inbox_.push_back({c.rank, c.pid, "PHASE start 0 0"});
        continue;
      }
      if (!c.hello) {
        log_("rank link: a message before HELLO, ignored: " + text.substr(0, 60));
        continue;
      }
      inbox_.push_back({c.rank, c.pid, std::move(text)});
    }
  }
}

std::vector<RankLinkServer::Message> RankLinkServer::Take() {
  MutexLock lock(&mu_);
  std::vector<Message> out;
  out.swap(inbox_);
  return out;
}

Status RankLinkServer::Send(pid_t pid, const std::string& text) {
  MutexLock lock(&mu_);
  for (auto it = conns_.rbegin(); it != conns_.rend(); ++it) {
    if (it->second.pid != pid) continue;
    if (::send(it->first, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
      return Status::Unavailable(std::string("rank link: ") + std::strerror(errno));
    }
    return Status::OK();
  }
  return Status::NotFound("process " + std::to_string(pid) + " has no rank link (it does not report its steps)");
}

void SignalSum::Add(int rank, int64_t generation, const std::string& text) {
  std::vector<std::string> w = rank_client::SplitWords(text);
  if (w.size() == 4 && w[0] == "PHASE") {
    wire::RankSignal p;
    p.set_rank(rank);
    p.set_generation(generation);
    p.set_steps(0);
    p.set_phase(w[1]);
    p.set_phase_ms(std::atof(w[2].c_str()));
    p.set_step(std::atoll(w[3].c_str()));
    p.set_observed_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count());
    Flush(rank);  // the steps before the phase go up before it
    singles_.push_back(std::move(p));
    return;
  }
  Result<rank_client::StepSignal> s = rank_client::StepSignal::Parse(text);
  if (!s.ok()) return;
  wire::RankSignal r;
  CopyToMessage(*s, &r);  // the figures, by their one field list
  r.set_rank(rank);
  r.set_generation(generation);
  r.set_observed_ms(s->observed_ms);
  if (s->anomalous()) {
    Flush(rank);
    singles_.push_back(std::move(r));
    urgent_ = true;
    return;
  }
  auto it = sums_.find(rank);
  if (it == sums_.end() || it->second.generation() != generation) {
    sums_[rank] = r;
    return;
  }
  // The newest step's values, the durations summed.
  wire::RankSignal& sum = it->second;
  r.set_steps(sum.steps() + r.steps());
  r.set_step_ms(sum.step_ms() + r.step_ms());
  r.set_compute_ms(sum.compute_ms() + r.compute_ms());
  r.set_comm_ms(sum.comm_ms() + r.comm_ms());
  r.set_device_ms(sum.device_ms() + r.device_ms());
  r.set_tokens(sum.tokens() + r.tokens());
  sum = std::move(r);
}

void SignalSum::Flush(int rank) {
  auto it = sums_.find(rank);
  if (it == sums_.end()) return;
  singles_.push_back(std::move(it->second));
  sums_.erase(it);
}

std::vector<wire::RankSignal> SignalSum::Take() {
  // In the order the ranks said them: what was flushed, then the newest sums.
  std::vector<wire::RankSignal> out;
  for (auto& s : singles_) out.push_back(std::move(s));
  for (auto& [rank, s] : sums_) out.push_back(std::move(s));
  sums_.clear();
  singles_.clear();
  urgent_ = false;
  return out;
}

}  // namespace bulwark::agent
