#include "rank_client/rank_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rank_client/shard_socket.h"

namespace bulwark::rank_client {

StepSignal StepSignal::Halted(int64_t step, double loss, double grad_norm, const std::string& why) {
  StepSignal s;
  s.step = step;
  s.loss = loss;
  s.grad_norm = grad_norm;
  s.local_grad_norm = grad_norm;
  s.nonfinite = why == "nan";
  s.halted = why;
  s.observed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return s;
}

std::string StepSignal::Format() const {
  char buf[320];
  std::snprintf(buf, sizeof buf, "STEP %lld %d %.9g %.9g %.9g %.3f %.3f %.3f %d %d %s %lld",
                static_cast<long long>(step), steps, loss, grad_norm, local_grad_norm, step_ms, compute_ms, comm_ms,
                local_nonfinite ? 1 : 0, nonfinite ? 1 : 0, halted.empty() ? "-" : halted.c_str(),
                static_cast<long long>(observed_ms));
  std::string out = buf;
  if (tokens > 0 || device_ms > 0) out += " " + std::to_string(tokens);
  if (device_ms > 0) {
    char d[32];
    std::snprintf(d, sizeof d, " %.3f", device_ms);
    out += d;
  }
  return out;
}

Result<StepSignal> StepSignal::Parse(const std::string& line) {
  std::vector<std::string> w = SplitWords(line);
  if (w.size() < 13 || w.size() > 15 || w[0] != "STEP") {
    return Status::InvalidArgument("rank link: malformed step report '" + line.substr(0, 80) + "'");
  }
  StepSignal s;
  try {
    s.step = std::stoll(w[1]);
    s.steps = std::stoi(w[2]);
    // strtod reads "nan" and "inf", which is how a bad step prints.
    s.loss = std::strtod(w[3].c_str(), nullptr);
    s.grad_norm = std::strtod(w[4].c_str(), nullptr);
    s.local_grad_norm = std::strtod(w[5].c_str(), nullptr);
    s.step_ms = std::stod(w[6]);
    s.compute_ms = std::stod(w[7]);
    s.comm_ms = std::stod(w[8]);
    s.local_nonfinite = w[9] == "1";
    s.nonfinite = w[10] == "1";
    s.halted = w[11] == "-" ? "" : w[11];
    s.observed_ms = std::stoll(w[12]);
    if (w.size() >= 14) s.tokens = std::stoll(w[13]);
    if (w.size() == 15) s.device_ms = std::stod(w[14]);
  } catch (const std::exception&) {
    return Status::InvalidArgument("rank link: malformed number in '" + line.substr(0, 80) + "'");
  }
  if (s.steps < 0 || s.tokens < 0 || s.device_ms < 0 || (s.halted != "" && s.halted != "nan" && s.halted != "spike")) {
    return Status::InvalidArgument("rank link: bad step report '" + line.substr(0, 80) + "'");
  }
  return s;
}

std::string RankAssignment::Format(const std::string& verb) const {
  return verb + " " + std::to_string(generation) + " " + std::to_string(rank) + " " + std::to_string(local_rank) + " " +
         std::to_string(world_size) + " " + std::to_string(local_world_size) + " " + master_addr + " " +
         std::to_string(master_port) + " " + std::to_string(backup_of) + " " + log_path +
         (ring_addr.empty() && ring_plan.empty()
              ? ""
              : " " + (ring_addr.empty() ? "-" : ring_addr) + " " + (ring_plan.empty() ? "-" : ring_plan));
}

Result<RankAssignment> RankAssignment::Parse(const std::string& line) {
  std::vector<std::string> w = SplitWords(line);
  if ((w.size() != 10 && w.size() != 12) || (w[0] != "ASSIGN" && w[0] != "SPLICE")) {
    return Status::InvalidArgument("rank link: malformed assignment '" + line.substr(0, 80) + "'");
  }
  RankAssignment a;
  try {
    a.generation = std::stoll(w[1]);
    a.rank = std::stoi(w[2]);
    a.local_rank = std::stoi(w[3]);
    a.world_size = std::stoi(w[4]);
    a.local_world_size = std::stoi(w[5]);
    a.master_addr = w[6];
    a.master_port = std::stoi(w[7]);
    a.backup_of = std::stoi(w[8]);
    a.log_path = w[9];
    if (w.size() == 12) {
      a.ring_addr = w[10] == "-" ? "" : w[10];
      a.ring_plan = w[11] == "-" ? "" : w[11];
    }
  } catch (const std::exception&) {
    return Status::InvalidArgument("rank link: malformed number in '" + line.substr(0, 80) + "'");
  }
  if (a.world_size < 1 || a.rank < 0 || a.rank >= a.world_size || a.master_port < 1 || a.master_port > 65535) {
    return Status::InvalidArgument("rank link: assignment out of range '" + line.substr(0, 80) + "'");
  }
  return a;
}

Result<std::unique_ptr<RankLink>> RankLink::FromEnv(int rank) {
  const char* path = std::getenv(kRankSocketEnv);
  if (path == nullptr || *path == '\0') return std::unique_ptr<RankLink>();
  Result<int> sock = ConnectShardSocket(path);
  if (!sock.ok()) return sock.status().Annotate(std::string(kRankSocketEnv) + " names no listening agent");
  std::unique_ptr<RankLink> link(new RankLink());
  link->sock_ = *sock;
  BULWARK_RETURN_IF_ERROR(SendShardMessage(link->sock_, "HELLO " + std::to_string(rank) + " " + std::to_string(::getpid())));
  return link;
}

RankLink::~RankLink() {
  if (sock_ >= 0) ::close(sock_);
}

void RankLink::Step(const StepSignal& s) {
  const std::string text = s.Format();
  ::send(sock_, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

void RankLink::Phase(const std::string& what, double expected_ms, int64_t after_step) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "PHASE %s %.0f %lld", what.c_str(), expected_ms, static_cast<long long>(after_step));
  ::send(sock_, buf, std::strlen(buf), MSG_DONTWAIT | MSG_NOSIGNAL);
}

std::optional<std::string> RankLink::ReadInject() {
  // An assignment is longer than an injection: a log path and a ring plan.
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(sock_, buf, sizeof buf - 1, MSG_DONTWAIT);
    if (n <= 0) return std::nullopt;
    const std::string text(buf, static_cast<size_t>(n));
    if (text.rfind("SPLICE ", 0) == 0) {
      // The next generation while this one trains: held until every rank
      // holds it (the step driver's vote), or this generation fails.
      Result<RankAssignment> a = RankAssignment::Parse(text);
      if (a.ok()) {
        splice_ = *a;
      } else {
        std::fprintf(stderr, "%s\n", a.status().message().c_str());
      }
      continue;
    }
    std::vector<std::string> w = SplitWords(text);
    if (w.size() != 2 || w[0] != "INJECT") return std::nullopt;
    // A yield or an abort is the agent's word for a later generation than
    // any SPLICE before it (a grow sends neither): that one's ASSIGN follows.
    if (w[1] == "yield" || w[1] == "abort") splice_.reset();
    return w[1];
  }
}

std::optional<std::string> RankLink::PollInject() {
  if (!held_.empty()) {
    std::string w = held_.front();
    held_.pop_front();
    return w;
  }
  return ReadInject();
}

bool RankLink::TakeAbort() {
  while (std::optional<std::string> w = ReadInject()) {
    if (*w == "abort") return true;
    held_.push_back(*w);
  }
  return false;
}

void RankLink::Hello(int rank) {
  const std::string text = "HELLO " + std::to_string(rank) + " " + std::to_string(::getpid());
  ::send(sock_, text.data(), text.size(), MSG_NOSIGNAL);
}

void RankLink::OfferInPlace() { ::send(sock_, "INPLACE", 7, MSG_NOSIGNAL); }

void RankLink::OfferSplice() { ::send(sock_, "SPLICE", 6, MSG_NOSIGNAL); }

std::optional<RankAssignment> RankLink::TakeSplice() {
  std::optional<RankAssignment> a;
  a.swap(splice_);
  return a;
}

std::optional<RankAssignment> RankLink::AwaitAssignment(const std::string& why, int64_t step, int timeout_ms) {
  const std::string text = why == "READY" ? why : why + " " + std::to_string(step);
  held_.clear();  // the ended generation's injections
  // Blocking: the agent must hear it, and nothing else is in flight.
  if (::send(sock_, text.data(), text.size(), MSG_NOSIGNAL) < 0) return std::nullopt;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int wait = -1;
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
      if (left <= 0) return std::nullopt;
      wait = static_cast<int>(left);
    }
    Result<std::string> m = RecvShardMessage(sock_, nullptr, wait);
    if (!m.ok()) return std::nullopt;  // closed, or no answer in time
    // A SPLICE that came too late to be voted on serves as the ASSIGN.
    if (m->rfind("ASSIGN ", 0) != 0 && m->rfind("SPLICE ", 0) != 0) continue;  // an injection for the failed generation
    Result<RankAssignment> a = RankAssignment::Parse(*m);
    if (!a.ok()) {
      std::fprintf(stderr, "%s\n", a.status().message().c_str());
      return std::nullopt;
    }
    return *a;
  }
}

bool RankLink::WaitClosed(int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{sock_, POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      char buf[256];
      if (::recv(sock_, buf, sizeof buf, MSG_DONTWAIT) == 0) return true;
    }
  }
  return false;
}

}  // namespace bulwark::rank_client
