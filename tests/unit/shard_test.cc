// In-memory checkpoint shards without libtorch or a cluster: a rank's
// client talking to real agent shard stores (Unix socket, TCP between
// stores, durable directory) in one process. The images and regions
// themselves are shard_image_test.cc's.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "agent/shard_auth.h"
#include "agent/shard_store.h"
#include "agent/shard_transfer.h"
#include "rank_client/shard_client.h"
#include "rank_client/shard_image.h"
#include "rank_client/shard_socket.h"
#include "rank_client/shard_region.h"
#include "common/files.h"
#include "support/process.h"

namespace bulwark {
namespace {

using rank_client::ShardClient;
using rank_client::ShardRegion;

std::vector<rank_client::ShardSection> Sections(const std::vector<float>& params, const std::string& extra) {
  return {{"params", params.data(), params.size() * sizeof(float)}, {"extra", extra.data(), extra.size()}};
}

bool Eventually(const std::function<bool()>& pred, double seconds = 10) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

class Stores : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    durable_ = dir_ + "/durable";
    for (const char* m : {"a", "b", "c"}) {
      auto s = agent::ShardStore::Start(m, dir_ + "/" + m + ".sock", "127.0.0.1", kToken, [this, name = std::string(m)](const std::string& l) {
        std::lock_guard<std::mutex> lock(log_mu_);
        logs_[name] += l + "\n";
      });
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      stores_[m] = std::move(*s);
    }
  }
  int64_t Holds(const std::string& m, int rank, bool backup) {
    for (const auto& h : stores_[m]->Holdings())
      if (h.rank == rank && h.backup == backup) return h.step;
    return -1;
  }
  std::vector<float> StateAt(int64_t step) { return std::vector<float>(50000, static_cast<float>(step)); }

  // Rank 1 of the job runs on b: what tells b's store the job's world and
  // shard size, which bound the images it accepts from peers.
  void StartPeerRank() {
    auto p = ShardClient::Connect(dir_ + "/b.sock", 1, 2);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->OpenRegion(rank_client::ShardImageSize(Sections(StateAt(0), "x"), 4096)).ok());
    peer_rank_ = std::move(*p);
  }

  // Rank 0 on machine a saves steps 1..n, backing up to b, persisting every 2.
  void Train(int n) {
    StartPeerRank();
    agent::ShardRoutes routes;
    routes.backup_machine = "b";
    routes.backup_addr = stores_["b"]->addr();
    routes.durable_dir = durable_;
    routes.persist_every = 2;
    stores_["a"]->SetRoutes(routes, {0});
    auto c = ShardClient::Connect(dir_ + "/a.sock", 0, 2);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto copies = (*c)->Copies();
    ASSERT_TRUE(copies.ok());
    EXPECT_TRUE(copies->empty());
    std::vector<float> params;
    ASSERT_TRUE((*c)->OpenRegion(rank_client::ShardImageSize(Sections(StateAt(0), "x"), 4096)).ok());
    // Steps here are microseconds apart, where a rank's are seconds: the
    // client itself must keep the backup one image behind at most.
    for (int step = 1; step <= n; ++step) {
      ASSERT_TRUE((*c)->WaitCopied().ok());  // before the "update"
      params = StateAt(step);
      ASSERT_TRUE((*c)->BeginSave({step, 0, 2}, "{\"step\":" + std::to_string(step) + "}", Sections(params, "x")).ok());
      // Sealing `step` waited for the previous image's push (shard_client.h:
      // else a dead machine's peer may share no step with the survivors).
      if (step > 1) {
        ASSERT_GE(Holds("b", 0, true), step - 1)
            << "step " << step << " was sealed before step " << step - 1 << " reached the backup peer";
      }
    }
    ASSERT_TRUE((*c)->WaitCopied().ok());
    ASSERT_TRUE(Eventually([&] { return Holds("b", 0, true) == n; })) << "backup never reached b";
    EXPECT_EQ(stores_["a"]->Stats().superseded, 0) << "a pushing rank's images are each pushed, none skipped";
    client_ = std::move(*c);  // the rank lives on until the test "kills" it
  }

  std::string dir_, durable_;
  std::map<std::string, std::unique_ptr<agent::ShardStore>> stores_;
  std::unique_ptr<ShardClient> client_, peer_rank_;
  std::string Log(const std::string& m) {
    std::lock_guard<std::mutex> lock(log_mu_);
    return logs_[m];
  }
  std::mutex log_mu_;
  std::map<std::string, std::string> logs_;
  static constexpr const char* kToken = "cluster-token-for-tests";
};

// A periodic bitwise check names the steps a rollback may need: pruning
// keeps the two newest persisted at or below it beside the newest two; a
// rollback removes what is above its cap, and a rank told the cap
// (BULWARK_RESTORE_AT_MOST) is offered nothing newer, from memory or disk.
TEST_F(Stores, DurableStepsAreKeptForARollbackAndThoseAboveItRemoved) {
  stores_["a"]->KeepDurable({5});
  Train(12);  // persists 2, 4, ..., 12
  // Step 12's persist follows its push, which is all Train waits for.
  const std::vector<int64_t> kept = {12, 10, 4, 2};
  EXPECT_TRUE(Eventually([&] { return rank_client::DurableSteps(durable_, 0) == kept; }))
      << "12 and 10 the newest, 4 and 2 kept for a rollback to step 5; found "
      << ::testing::PrintToString(rank_client::DurableSteps(durable_, 0));
  client_.reset();
  ::setenv(rank_client::kRestoreAtMostEnv, "5", 1);
  stores_["a"]->SetRoutes({"", "", {}, durable_, 2}, {0});
  auto c = ShardClient::Connect(dir_ + "/a.sock", 0, 2);
  ASSERT_TRUE(c.ok());
  auto copies = (*c)->Copies();
  ::unsetenv(rank_client::kRestoreAtMostEnv);
  ASSERT_TRUE(copies.ok()) << copies.status().ToString();
  std::vector<int64_t> offered;
  for (const auto& cp : *copies) offered.push_back(cp.info.step);
  EXPECT_EQ(offered, (std::vector<int64_t>{4, 2})) << "a's memory holds 12 and 11: above the cap";
  EXPECT_EQ(stores_["a"]->DiscardDurableAfter(durable_, {0}, 5), 2);
  EXPECT_EQ(rank_client::DurableSteps(durable_, 0), (std::vector<int64_t>{4, 2}));
}

TEST_F(Stores, KeepBackupAndDurableCopiesAndOfferThemAtRestore) {
  Train(5);
  EXPECT_EQ(Holds("a", 0, false), 5);
  EXPECT_EQ(rank_client::DurableSteps(durable_, 0), (std::vector<int64_t>{4, 2}));
  EXPECT_TRUE(Eventually([&] { return stores_["a"]->Stats().pushed + stores_["a"]->Stats().superseded == 5; }));
  client_.reset();  // the rank dies; a's memory keeps its region

  // Restart in place on a: memory first, newest first, then durable.
  {
    stores_["a"]->SetRoutes({"b", stores_["b"]->addr(), {{0, "b", stores_["b"]->addr()}}, durable_, 2}, {0});
    auto c = ShardClient::Connect(dir_ + "/a.sock", 0, 2);
    ASSERT_TRUE(c.ok());
    auto copies = (*c)->Copies();
    ASSERT_TRUE(copies.ok()) << copies.status().ToString();
    ASSERT_GE(copies->size(), 4u);
    EXPECT_EQ((*copies)[0].source, "memory");
    EXPECT_EQ((*copies)[0].info.step, 5);
    auto v = (*copies)[0].Open();
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(reinterpret_cast<const float*>(v->sections["params"].first)[123], 5.0f);
    EXPECT_EQ(copies->back().source, "durable");
    bool peer = false;
    for (auto& cp : *copies) peer |= cp.source == "peer:b" && cp.info.step == 5;
    EXPECT_TRUE(peer) << "b's backup fetched as a peer copy";
  }

  // a is gone; c replaces it and restores from b's backup.
  stores_.erase("a");
  stores_["c"]->SetRoutes({"b", stores_["b"]->addr(), {{0, "b", stores_["b"]->addr()}}, durable_, 2}, {0});
  auto c = ShardClient::Connect(dir_ + "/c.sock", 0, 2);
  ASSERT_TRUE(c.ok());
  auto copies = (*c)->Copies();
  ASSERT_TRUE(copies.ok());
  ASSERT_FALSE(copies->empty());
  EXPECT_EQ((*copies)[0].source, "peer:b");
  EXPECT_EQ((*copies)[0].info.step, 5);
  auto v = (*copies)[0].Open();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(reinterpret_cast<const float*>(v->sections["params"].first)[49999], 5.0f);
}

TEST_F(Stores, CorruptMemoryCopyIsDetectedAndOthersRemain) {
  Train(3);
  ASSERT_EQ(stores_["a"]->Corrupt(0), std::optional<int64_t>(3));
  client_.reset();
  stores_["a"]->SetRoutes({"b", stores_["b"]->addr(), {{0, "b", stores_["b"]->addr()}}, durable_, 2}, {0});
  auto c = ShardClient::Connect(dir_ + "/a.sock", 0, 2);
  ASSERT_TRUE(c.ok());
  auto copies = (*c)->Copies();
  ASSERT_TRUE(copies.ok());
  ASSERT_EQ((*copies)[0].source, "memory");
  ASSERT_EQ((*copies)[0].info.step, 3);
  auto bad = (*copies)[0].Open();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kCorrupt);
  int good_at_3 = 0;
  for (auto& cp : *copies)
    if (cp.info.step == 3 && cp.Open().ok()) ++good_at_3;
  EXPECT_EQ(good_at_3, 1) << "b's backup of step 3 is intact";
}

// A GPU rank's sections are pinned host memory that a device copy is still
// filling when BeginSave returns (trainer/state/device_stage.h): the copier
// runs `ready` first and seals what the sections hold after it, and a
// `ready` that fails fails the save, which WaitCopied reports.
TEST_F(Stores, TheCopierSealsWhatTheSectionsHoldOnceReadyReturns) {
  auto c = ShardClient::Connect(dir_ + "/a.sock", 0, 1);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<float> staged = StateAt(0);
  ASSERT_TRUE((*c)->OpenRegion(rank_client::ShardImageSize(Sections(staged, "x"), 4096)).ok());
  std::atomic<bool> filled{false};
  auto late_copy = [&] {  // the "device copy" lands only now
    std::fill(staged.begin(), staged.end(), 7.0f);
    filled = true;
    return Status::OK();
  };
  ASSERT_TRUE((*c)->BeginSave({7, 0, 1}, "{\"step\":7}", Sections(staged, "x"), late_copy).ok());
  ASSERT_TRUE((*c)->WaitCopied().ok());
  EXPECT_TRUE(filled);
  ASSERT_TRUE(Eventually([&] { return Holds("a", 0, false) == 7; }));

  auto failing = [] { return Status::Internal("the device-to-host copy of the checkpoint failed: test"); };
  ASSERT_TRUE((*c)->BeginSave({8, 0, 1}, "{\"step\":8}", Sections(staged, "x"), failing).ok());
  Status st = (*c)->WaitCopied();
  EXPECT_EQ(st.code(), Status::Code::kInternal);
  EXPECT_NE(st.message().find("device-to-host"), std::string::npos) << st.ToString();
  EXPECT_EQ(Holds("a", 0, false), 7) << "a failed save announces nothing";
  c->reset();

  auto again = ShardClient::Connect(dir_ + "/a.sock", 0, 1);
  ASSERT_TRUE(again.ok());
  auto copies = (*again)->Copies();
  ASSERT_TRUE(copies.ok() && !copies->empty());
  auto v = (*copies)[0].Open();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->info.step, 7);
  EXPECT_EQ(reinterpret_cast<const float*>(v->sections["params"].first)[4242], 7.0f) << "sealed before ready ran";
}

TEST_F(Stores, UnreachablePeerCostsNothingButItsCopy) {
  agent::ShardRoutes routes;
  routes.restore_from = {{0, "gone", "127.0.0.1:1"}};
  routes.durable_dir = durable_;
  stores_["c"]->SetRoutes(routes, {0});
  auto c = ShardClient::Connect(dir_ + "/c.sock", 0, 2);
  ASSERT_TRUE(c.ok());
  auto copies = (*c)->Copies();
  ASSERT_TRUE(copies.ok()) << copies.status().ToString();
  EXPECT_TRUE(copies->empty());
  EXPECT_FALSE(ShardClient::Connect(dir_ + "/nobody.sock", 0, 1).ok());
}

// A machine that died answers nothing, not even a refusal. Here: a listener
// whose accept queue is full, so the kernel drops every further SYN and a
// connect neither completes nor fails (the self-check says whether it did).
class SilentPeer {
 public:
  SilentPeer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof a;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener_, 0) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    addr_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    // Connects complete into the queue until it is full: the first one
    // still pending after 300 ms shows the peer silent.
    for (int i = 0; i < 8 && !silent_; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      fillers_.push_back(fd);
      (void)::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      pollfd p{fd, POLLOUT, 0};
      silent_ = ::poll(&p, 1, 300) == 0;
    }
  }
  ~SilentPeer() {
    for (int fd : fillers_) ::close(fd);
    if (listener_ >= 0) ::close(listener_);
  }
  const std::string& addr() const { return addr_; }
  bool silent() const { return silent_; }

 private:
  int listener_ = -1;
  std::vector<int> fillers_;
  std::string addr_;
  bool silent_ = false;
};

// Regression (issue 36): a healthy agent was evicted for 9.6 s of silence.
// Its main loop's SetRoutes for a restart joined the previous restart's
// fetch, stuck dialling a peer that had died. The newer routes must take
// over at once, and what the rank restores must be theirs.
TEST_F(Stores, ARestartDoesNotWaitForAFetchFromAPeerThatDoesNotAnswer) {
  Train(3);
  client_.reset();
  SilentPeer dead;
  ASSERT_TRUE(dead.silent()) << "the test's dead peer answered a connect";
  agent::ShardRoutes from_dead, from_b;
  from_dead.restore_from = {{0, "dead", dead.addr()}};
  from_b.restore_from = {{0, "b", stores_["b"]->addr()}};
  from_dead.durable_dir = from_b.durable_dir = durable_;
  stores_["c"]->SetRoutes(from_dead, {0});
  auto again = std::async(std::launch::async, [&] { stores_["c"]->SetRoutes(from_b, {0}); });
  // Well inside the connect deadline (1.5 s): the old fetch is still stuck.
  ASSERT_EQ(again.wait_for(std::chrono::milliseconds(500)), std::future_status::ready)
      << "SetRoutes waited for the fetch from the peer that does not answer";
  auto c = ShardClient::Connect(dir_ + "/c.sock", 0, 2);
  ASSERT_TRUE(c.ok());
  auto copies = (*c)->Copies(5000);
  ASSERT_TRUE(copies.ok()) << copies.status().ToString();
  ASSERT_FALSE(copies->empty());
  EXPECT_EQ((*copies)[0].source, "peer:b");
  EXPECT_EQ((*copies)[0].info.step, 3);
  EXPECT_TRUE((*copies)[0].Open().ok());
  for (const auto& cp : *copies) EXPECT_NE(cp.source, "peer:dead");
  EXPECT_TRUE(Eventually([&] { return Log("c").find("from dead cancelled") != std::string::npos; })) << Log("c");

  // A machine that forgets its copies (requeue) stops fetching them too: a
  // restore waiting for that fetch is answered at once, from disk alone.
  stores_["c"]->SetRoutes(from_dead, {0});
  stores_["c"]->Forget();
  auto fresh = ShardClient::Connect(dir_ + "/c.sock", 0, 2);
  ASSERT_TRUE(fresh.ok());
  auto left = (*fresh)->Copies(500);
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  ASSERT_FALSE(left->empty());
  for (const auto& cp : *left) EXPECT_EQ(cp.source, "durable");

  // Nor does the agent's exit wait for a fetch under way.
  stores_["c"]->SetRoutes(from_dead, {0});
  auto gone = std::async(std::launch::async, [&] { stores_.erase("c"); });
  EXPECT_EQ(gone.wait_for(std::chrono::milliseconds(500)), std::future_status::ready)
      << "the store's shutdown waited for the fetch from the peer that does not answer";
}

// A source that does not answer is given up at the connect deadline, not
// the transfer timeout (10 s), and the rank restores from the next source.
TEST_F(Stores, AFetchFromAPeerThatDoesNotAnswerFallsBackToTheNextSourceSoon) {
  Train(2);
  client_.reset();
  SilentPeer dead;
  ASSERT_TRUE(dead.silent()) << "the test's dead peer answered a connect";
  auto t = std::chrono::steady_clock::now();
  auto fd = agent::DialTcp(dead.addr(), 10, 300);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("no answer within 300 ms"), std::string::npos) << fd.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t, std::chrono::seconds(2));

  agent::ShardRoutes routes;
  routes.restore_from = {{0, "dead", dead.addr()}, {0, "b", stores_["b"]->addr()}};
  routes.durable_dir = durable_;
  stores_["c"]->SetRoutes(routes, {0});
  auto c = ShardClient::Connect(dir_ + "/c.sock", 0, 2);
  ASSERT_TRUE(c.ok());
  auto copies = (*c)->Copies(5000);  // half the transfer timeout
  ASSERT_TRUE(copies.ok()) << copies.status().ToString();
  ASSERT_GE(copies->size(), 2u);
  EXPECT_EQ((*copies)[0].source, "peer:b");
  EXPECT_EQ((*copies)[0].info.step, 2);
  EXPECT_EQ(copies->back().source, "durable");
  EXPECT_NE(Log("c").find("from dead failed"), std::string::npos) << Log("c");
  EXPECT_NE(Log("c").find("no answer within 1500 ms"), std::string::npos) << Log("c");
}

// Every source at once: four that do not answer cost one connect deadline
// (1.5 s) beside the one that does, not four before it (6 s, past the
// restore's 4 s wait here).
TEST_F(Stores, SourcesAreFetchedAtOnceSoSilentOnesCostOneDeadline) {
  Train(2);
  client_.reset();
  SilentPeer dead;
  ASSERT_TRUE(dead.silent()) << "the test's dead peer answered a connect";
  agent::ShardRoutes routes;
  for (const char* name : {"dead1", "dead2", "dead3", "dead4"}) routes.restore_from.push_back({0, name, dead.addr()});
  routes.restore_from.push_back({0, "b", stores_["b"]->addr()});
  routes.durable_dir = durable_;
  stores_["c"]->SetRoutes(routes, {0});
  auto c = ShardClient::Connect(dir_ + "/c.sock", 0, 2);
  ASSERT_TRUE(c.ok());
  auto copies = (*c)->Copies(4000);
  ASSERT_TRUE(copies.ok()) << copies.status().ToString();
  ASSERT_GE(copies->size(), 2u);
  EXPECT_EQ((*copies)[0].source, "peer:b") << Log("c");
  EXPECT_EQ((*copies)[0].info.step, 2);
  for (const char* name : {"dead1", "dead2", "dead3", "dead4"}) {
    EXPECT_NE(Log("c").find(std::string("from ") + name + " failed"), std::string::npos) << Log("c");
  }
}

// The shard protocol is authenticated and bounded: a connection that cannot
// prove it holds the cluster token gets nothing, and an authenticated one
// can push only images the job's shard layout allows.
TEST_F(Stores, PeersWithoutTheTokenAndImplausibleImagesAreRefusedAndLogged) {
  StartPeerRank();  // b runs rank 1 of 2 with shards of this size
  const size_t shard = rank_client::ShardImageSize(Sections(StateAt(0), "x"), 4096);
  const std::string b = stores_["b"]->addr();
  auto dial = [&] {
    auto fd = agent::DialTcp(b, 5);
    EXPECT_TRUE(fd.ok()) << fd.status().ToString();
    return fd.ok() ? *fd : -1;
  };
  auto refused = [&] { return stores_["b"]->Stats().refused; };

  // 1. No token: a request straight away is not an AUTH line.
  int fd = dial();
  const std::string fetch = "FETCH 0\n";
  ASSERT_TRUE(agent::SendAll(fd, fetch.data(), fetch.size()).ok());
  auto hello = agent::RecvLine(fd);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->rfind("HELLO ", 0), 0u) << *hello;
  auto answer = agent::RecvLine(fd);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->rfind("DENIED", 0), 0u) << *answer;
  ::close(fd);
  EXPECT_TRUE(Eventually([&] { return refused() == 1; }));

  // 2. A wrong token: refused, and the client learns it was refused.
  fd = dial();
  Status st = agent::AuthenticateToPeer(fd, "not-the-token");
  EXPECT_EQ(st.code(), Status::Code::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find("wrong cluster token"), std::string::npos) << st.ToString();
  ::close(fd);
  EXPECT_TRUE(Eventually([&] { return refused() == 2; }));
  EXPECT_TRUE(Eventually([&] { return Log("b").find("refused a shard connection from 127.0.0.1:") != std::string::npos; })) << Log("b");

  // 3. The right token, but an image far larger than any shard of this job.
  auto push = [&](int rank, uint64_t bytes, const rank_client::ShardHeader* header) -> std::string {
    int c = dial();
    Status a = agent::AuthenticateToPeer(c, kToken);
    EXPECT_TRUE(a.ok()) << a.ToString();
    const std::string head = "PUSH " + std::to_string(rank) + " 7 " + std::to_string(bytes) + "\n";
    EXPECT_TRUE(agent::SendAll(c, head.data(), head.size()).ok());
    if (header != nullptr) (void)agent::SendAll(c, header, sizeof *header);
    auto r = agent::RecvLine(c);
    ::close(c);
    return r.ok() ? *r : "(closed)";
  };
  EXPECT_EQ(push(0, uint64_t{40} << 30, nullptr), "REFUSED") << "40 GiB must not be allocated";
  EXPECT_TRUE(Eventually([&] { return Log("b").find("exceeds 8x this job's largest local shard") != std::string::npos; })) << Log("b");
  // 4. A rank the job does not have.
  EXPECT_EQ(push(5, shard, nullptr), "REFUSED");
  EXPECT_TRUE(Eventually([&] { return Log("b").find("rank 5 is not in this job of 2 ranks") != std::string::npos; })) << Log("b");
  // 5. An image whose header names another job (world of 3) than the request.
  rank_client::ShardHeader h{};
  h.rank = 0;
  h.world_size = 3;
  h.payload_bytes = 16;
  EXPECT_EQ(push(0, shard, &h), "(closed)");
  EXPECT_TRUE(Eventually([&] { return Log("b").find("its header names rank 0 of 3") != std::string::npos; })) << Log("b");
  EXPECT_TRUE(Eventually([&] { return refused() == 5; })) << refused();
  EXPECT_EQ(Holds("b", 0, true), -1) << "nothing refused became a restore candidate";

  // A store of another cluster (another token) cannot prove itself to us.
  auto other = agent::ShardStore::Start("x", dir_ + "/x.sock", "127.0.0.1", "another-cluster", [](const std::string&) {});
  ASSERT_TRUE(other.ok());
  auto xfd = agent::DialTcp((*other)->addr(), 5);
  ASSERT_TRUE(xfd.ok());
  EXPECT_EQ(agent::AuthenticateToPeer(*xfd, kToken).code(), Status::Code::kPermissionDenied);
  ::close(*xfd);
  // The proof depends on the token and the nonce, and is never the token.
  EXPECT_NE(agent::ShardProof("a", "client", "n1"), agent::ShardProof("b", "client", "n1"));
  EXPECT_NE(agent::ShardProof("a", "client", "n1"), agent::ShardProof("a", "client", "n2"));
  EXPECT_EQ(agent::ShardProof("a", "client", "n1").find('a'), agent::ShardProof("a", "client", "n1").find('a'));
  EXPECT_EQ(agent::ShardStore::Start("y", dir_ + "/y.sock", "127.0.0.1", "", [](const std::string&) {}).status().code(),
            Status::Code::kInvalidArgument);
}

// An agent that exits removes only the socket it bound: a successor
// started on the same machine directory keeps its own, and its ranks can
// still reach it.
TEST(ShardStoreSocket, AnExitingStoreLeavesItsSuccessorsSocket) {
  const std::string path = testing::MakeTempDir() + "/shards.sock";
  auto first = agent::ShardStore::Start("m01", path, "127.0.0.1", "t0ken", [](const std::string&) {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = agent::ShardStore::Start("m01", path, "127.0.0.1", "t0ken", [](const std::string&) {});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  first->reset();
  Result<int> fd = rank_client::ConnectShardSocket(path);
  ASSERT_TRUE(fd.ok()) << "the successor's socket is gone: " << fd.status().ToString();
  ::close(*fd);
  second->reset();
  Result<int> gone = rank_client::ConnectShardSocket(path);
  EXPECT_FALSE(gone.ok()) << "the last store leaves no socket behind";
}

}  // namespace
}  // namespace bulwark
