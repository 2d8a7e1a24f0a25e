#include "rank_client/shard_client.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "rank_client/shard_socket.h"
#include "common/files.h"

namespace bulwark::rank_client {
namespace {

using Clock = std::chrono::steady_clock;
// The agent releases a slot once it is sent and persisted; a slot held this
// long means the agent is stuck, and training must not stall behind it.
constexpr int kReleaseTimeoutMs = 60000;

// CPU time of the calling thread: what the copy takes from training, which
// its wall time (stretched by its low priority) does not tell.
double ThreadCpuMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

void LowerThreadPriority() {
  // Linux applies nice per thread. The copy has most of a step to finish, so
  // it can yield to the training threads and soak up the moments they wait
  // (collectives, data) instead of taking cores from their compute.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
}

std::string DurableShardPath(const std::string& dir, int64_t step, int rank) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld/rank-%d.shard", static_cast<long long>(step), rank);
  return JoinPath(dir, name);
}

std::optional<int64_t> RestoreAtMost() {
  const char* v = std::getenv(kRestoreAtMostEnv);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::strtoll(v, nullptr, 10);
}

std::vector<int64_t> DurableSteps(const std::string& dir, int rank) {
  std::vector<int64_t> steps;
  for (const std::string& e : ListDir(dir)) {
    long long s = 0;
    char tail = 0;
    if (std::sscanf(e.c_str(), "step-%lld%c", &s, &tail) != 1) continue;
    if (PathExists(DurableShardPath(dir, s, rank))) steps.push_back(s);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

Result<ShardView> ShardCopy::Open() {
  if (region_ != nullptr) {
    return ReadShardImage(region_->slot(slot_), region_->slot_capacity(),
                          source + " copy of step " + std::to_string(info.step));
  }
  if (data_.empty()) {
    auto bytes = ReadFile(path_);
    if (!bytes.ok()) return bytes.status();
    data_ = std::move(*bytes);
  }
  return ReadShardImage(data_.data(), data_.size(), path_);
}

Result<std::unique_ptr<ShardClient>> ShardClient::Connect(const std::string& socket_path, int rank, int world_size) {
  auto s = ConnectShardSocket(socket_path);
  if (!s.ok()) return s.status();
  std::unique_ptr<ShardClient> c(new ShardClient());
  c->sock_ = *s;
  c->rank_ = rank;
  c->world_size_ = world_size;
  c->copier_ = std::thread([p = c.get()] { p->CopyLoop(); });
  return c;
}

ShardClient::~ShardClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (copier_.joinable()) copier_.join();
  if (sock_ >= 0) ::close(sock_);
}

Result<std::vector<ShardCopy>> ShardClient::Copies(int timeout_ms) {
  BULWARK_RETURN_IF_ERROR(
      SendShardMessage(sock_, "RESTORE " + std::to_string(rank_) + " " + std::to_string(world_size_)));
  std::vector<ShardCopy> out;
  std::string durable;
  const std::optional<int64_t> cap = RestoreAtMost();
  for (;;) {
    int fd = -1;
    auto msg = RecvShardMessage(sock_, &fd, timeout_ms);
    if (!msg.ok()) return msg.status().Annotate("asking the agent for this rank's shard copies");
    auto w = SplitWords(*msg);
    if (w.empty()) continue;
    if (w[0] == "END") break;
    if (w[0] == "DURABLE" && w.size() == 2) durable = w[1];
    if (w[0] != "COPY" || w.size() != 2 || fd < 0) {
      if (fd >= 0) ::close(fd);
      continue;
    }
    auto region = ShardRegion::Map(fd);
    if (!region.ok()) continue;
    offered_.push_back(std::make_unique<ShardRegion>(std::move(*region)));
    for (const auto& s : offered_.back()->SealedSlots()) {
      if (s.info.rank != rank_) continue;  // the agent filters; a mixup must not restore another rank
      if (cap && s.info.step > *cap) continue;  // may hold a drift (RestoreAtMost)
      ShardCopy c;
      c.source = w[1];
      c.info = s.info;
      c.region_ = offered_.back().get();
      c.slot_ = s.slot;
      c.bytes_ = s.bytes;
      out.push_back(std::move(c));
    }
  }
  if (!durable.empty()) {
    for (int64_t step : DurableSteps(durable, rank_)) {
      if (cap && step > *cap) continue;
      ShardCopy c;
      c.source = "durable";
      c.info = {step, rank_, world_size_};
      c.path_ = DurableShardPath(durable, step, rank_);
      out.push_back(std::move(c));
    }
  }
  return out;
}

Status ShardClient::OpenRegion(const std::vector<size_t>& images, bool peer_writes) {
  if (images.empty() || kSlotsPerImage * images.size() > static_cast<size_t>(kMaxSlots)) {
    return Status::InvalidArgument("a shard region holds 1 to " + std::to_string(kMaxSlots / kSlotsPerImage) +
                                   " images");
  }
  const size_t capacity = *std::max_element(images.begin(), images.end());
  auto r = ShardRegion::Create("bulwark-shard-rank-" + std::to_string(rank_), capacity,
                               kSlotsPerImage * static_cast<int>(images.size()));
  if (!r.ok()) return r.status();
  region_ = std::move(*r);
  images_ = static_cast<int>(images.size());
  pushes_ = !peer_writes;
  next_ = 0;
  BULWARK_RETURN_IF_ERROR(SendShardMessage(
      sock_, "REGION " + std::to_string(rank_) + " " + std::to_string(world_size_) + (peer_writes ? " PEERWRITES" : ""),
      region_.fd()));
  int fd = -1;
  auto reply = RecvShardMessage(sock_, &fd, 10000);
  if (!reply.ok()) return reply.status().Annotate("handing the shard region to the agent");
  if (reply->rfind("OK", 0) != 0) return Status::Unavailable("the agent refused the shard region: " + *reply);
  return Status::OK();
}

Status ShardClient::WaitReleased(int slot) {
  while (in_agent_[slot]) {
    int fd = -1;
    auto msg = RecvShardMessage(sock_, &fd, kReleaseTimeoutMs);
    if (fd >= 0) ::close(fd);
    if (!msg.ok()) return msg.status().Annotate("waiting for the agent to release shard slot " + std::to_string(slot));
    auto w = SplitWords(*msg);
    if (w.size() == 2 && w[0] == "RELEASED") {
      int s = std::atoi(w[1].c_str());
      if (s >= 0 && s < kMaxSlots) in_agent_[s] = false;
    }
  }
  return Status::OK();
}

Status ShardClient::BeginSave(std::vector<ShardImageParts> images, std::function<Status()> ready) {
  if (!region_.valid()) return Status::FailedPrecondition("BeginSave before OpenRegion");
  if (static_cast<int>(images.size()) != images_) {
    return Status::InvalidArgument("BeginSave with " + std::to_string(images.size()) + " images, the region holds " +
                                   std::to_string(images_));
  }
  BULWARK_RETURN_IF_ERROR(WaitCopied());
  auto t = Clock::now();
  Status st = Status::OK();
  // A pushing rank waits for every slot (the previous image's push; see the
  // header), the others only for the slots about to be overwritten. The
  // push had a whole step to finish, so this rarely waits.
  for (int i = 0; i < images_ * kSlotsPerImage && st.ok(); ++i) {
    if (pushes_ || i % kSlotsPerImage == next_) st = WaitReleased(i);
  }
  blocked_ms_ += MsSince(t);
  BULWARK_RETURN_IF_ERROR(st);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = Job{next_, std::move(images), std::move(ready)};
    for (int i = 0; i < images_; ++i) in_agent_[next_ + kSlotsPerImage * i] = true;  // announced when sealed
  }
  cv_.notify_all();
  next_ = (next_ + 1) % kSlotsPerImage;
  return Status::OK();
}

Status ShardClient::WaitCopied() {
  auto t = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !job_.has_value(); });
  blocked_ms_ += MsSince(t);
  Status st = copy_status_;
  copy_status_ = Status::OK();
  return st;
}

double ShardClient::TakeCopyCpuMs() { return copy_ms_.exchange(0); }

double ShardClient::TakeBlockedMs() {
  double v = blocked_ms_;
  blocked_ms_ = 0;
  return v;
}

void ShardClient::CopyLoop() {
  LowerThreadPriority();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_.has_value(); });
    if (stop_) return;
    Job job = *job_;
    lock.unlock();
    Status st = job.ready ? job.ready() : Status::OK();
    for (size_t i = 0; i < job.images.size(); ++i) {
      const int slot = job.first_slot + kSlotsPerImage * static_cast<int>(i);
      const ShardImageParts& im = job.images[i];
      const double cpu0 = ThreadCpuMs();
      if (st.ok()) st = WriteShardImage(region_.slot(slot), region_.slot_capacity(), im.info, im.meta, im.sections);
      copy_ms_.store(copy_ms_.load() + ThreadCpuMs() - cpu0);
      if (st.ok()) st = SendShardMessage(sock_, "SAVED " + std::to_string(slot) + " " + std::to_string(im.info.step));
      if (!st.ok()) in_agent_[slot] = false;
    }
    lock.lock();
    if (!st.ok()) copy_status_ = st;
    job_.reset();
    cv_.notify_all();
  }
}

}  // namespace bulwark::rank_client
