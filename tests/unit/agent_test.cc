// The agent's parts: log follower, supervisor, exit watcher, rank link,
// echo hold, inspector, timing and its worker threads (its signature table:
// signatures_test.cc).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <thread>

#include "agent/clock.h"
#include "agent/echo_hold.h"
#include "agent/exit_watcher.h"
#include "agent/inspector.h"
#include "agent/monitor.h"
#include "agent/supervisor.h"
#include "agent/timing.h"
#include "agent/workers.h"
#include "common/files.h"
#include "rank_client/rank_link.h"
#include "support/process.h"

namespace bulwark {
namespace {

TEST(LogFollower, PicksStepsAndDoneAndKeepsTheTail) {
  const std::string path = testing::MakeTempDir() + "/rank-0.log";
  std::ofstream(path) << "{\"event\":\"step\",\"step\":99}\n";  // an earlier generation's
  agent::LogFollower f(path);
  {
    std::ofstream out(path, std::ios::app);
    out << "{\"event\":\"note\",\"message\":\"resumed\"}\n{\"event\":\"step\",\"step\":4,\"loss\":3.2}\n";
    out << "{\"event\":\"done\",\"step\":5,\"loss\":3.1}\npartial";
  }
  f.Poll();
  ASSERT_TRUE(f.last_step().has_value());
  EXPECT_EQ(*f.last_step(), 4);
  ASSERT_TRUE(f.done_step().has_value());
  EXPECT_EQ(*f.done_step(), 5);
  EXPECT_EQ(f.tail().size(), 3u);  // "partial" waits for its newline
}

TEST(LogFollower, WithAProgressPatternMatchedLinesAreStepsWithTheirLoss) {
  const std::string path = testing::MakeTempDir() + "/rank-0.log";
  auto pattern = ProgressPattern::Compile("step (?P<step>\\d+) loss (?P<loss>\\S+)");
  ASSERT_TRUE(pattern.ok()) << pattern.status().ToString();
  agent::LogFollower f(path, std::make_shared<const ProgressPattern>(std::move(*pattern)));
  std::ofstream(path) << "loading data\nstep 1 loss 4.5\nwarning: slow\nstep 2 loss 4.25\n";
  f.Poll();
  ASSERT_TRUE(f.last_step().has_value());
  EXPECT_EQ(*f.last_step(), 2);
  std::vector<agent::LogFollower::Progress> p = f.TakeProgress();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].match.step, 1);
  EXPECT_DOUBLE_EQ(p[1].match.loss.value_or(0), 4.25);
  EXPECT_TRUE(f.TakeProgress().empty()) << "taken once";
  EXPECT_EQ(f.tail().size(), 4u) << "matched lines stay in the tail for the signature table";
}

// A peer-lost exit waits out its grace for the restart that makes it an
// echo; the grace stands still while the controller cannot be reached.
TEST(EchoHold, GraceRunsOnlyWhileTheControllerIsReachable) {
  using C = std::chrono::steady_clock;
  using std::chrono::seconds;
  agent::EchoHold<int> hold(seconds(4));
  const C::time_point t0 = C::now();
  hold.Hold(7, t0);
  EXPECT_TRUE(hold.Due(t0 + seconds(1), true).empty());
  // The controller goes away for 10 s: none of it counts.
  EXPECT_TRUE(hold.Due(t0 + seconds(6), false).empty());
  EXPECT_TRUE(hold.Due(t0 + seconds(11), false).empty());
  EXPECT_TRUE(hold.Due(t0 + seconds(13), true).empty()) << "3 s of reachable grace so far";
  EXPECT_EQ(hold.Due(t0 + seconds(14), true), std::vector<int>{7}) << "4 s of reachable grace";
  // A restart drops what is held.
  hold.Hold(8, t0 + seconds(20));
  EXPECT_EQ(hold.DropEchoes(t0 + seconds(21)), 1u);
  EXPECT_TRUE(hold.Due(t0 + seconds(30), true).empty());
}

// The agent's own rules on its own clock, as its loop applies them: every
// loop period it releases what is due; every report period it reports, and
// the report goes through only while the controller is up. The controller
// is away from 1 s to 11 s: the grace counts the 1.5 s it takes to notice
// (kReportPeriod + kCallDeadline after the last good report), then stands
// still until a report goes through again. No sleeps: a ManualClock.
TEST(AgentTiming, APeerLostExitWaitsOutItsGraceOnlyWhileTheControllerAnswers) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  agent::ManualClock clock(agent::AgentClock::time_point(std::chrono::hours(490000)));
  const agent::AgentClock::time_point t0 = clock.Now();
  agent::EchoHold<int, std::chrono::system_clock> hold(agent::kPeerLostGrace);
  hold.Hold(5, t0);
  auto last_report_ok = t0;
  auto controller_up = [&](agent::AgentClock::time_point t) { return t < t0 + seconds(1) || t >= t0 + seconds(11); };
  std::optional<agent::AgentClock::time_point> reported;
  for (int tick = 0; tick < 400 && !reported; ++tick) {
    clock.Advance(agent::kLoopPeriod);
    const auto now = clock.Now();
    if (controller_up(now) && ((now - t0) % agent::kReportPeriod).count() == 0) last_report_ok = now;
    if (!hold.Due(now, agent::ControllerReachable(now, last_report_ok)).empty()) reported = now;
  }
  ASSERT_TRUE(reported.has_value()) << "never reported";
  // Counted: 0 to 2.5 s (the last good report at 0.5 s, plus 2 s to call
  // it unreachable), 10.9 to 11 s, then the 1.4 s left of the 4 s grace.
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(*reported - t0).count(), 12400);
}

// The lease (cluster/fence.h): fenced once the fence timeout has passed
// since the last report that went through was *sent*; never with fencing
// off. A peer-lost exit waits out the controller's longer heartbeat
// timeout (fence + 1 s) and two seconds more before it is reported.
TEST(AgentTiming, TheFenceCountsFromTheLastGoodReportsSending) {
  using std::chrono::milliseconds;
  const auto sent = std::chrono::steady_clock::time_point(std::chrono::hours(1));
  EXPECT_FALSE(agent::FenceDue(sent + milliseconds(3000), sent, milliseconds(3000)));
  EXPECT_TRUE(agent::FenceDue(sent + milliseconds(3001), sent, milliseconds(3000)));
  EXPECT_FALSE(agent::FenceDue(sent + std::chrono::hours(1), sent, milliseconds(0))) << "off";
  EXPECT_EQ(agent::PeerLostGrace(milliseconds(0)), agent::kPeerLostGrace);
  EXPECT_EQ(agent::PeerLostGrace(milliseconds(3000)), milliseconds(6000));
}

TEST(AgentTiming, ARestartWithinTheGraceMakesTheHeldExitItsEcho) {
  agent::ManualClock clock(agent::AgentClock::time_point(std::chrono::hours(490000)));
  agent::EchoHold<int, std::chrono::system_clock> hold(agent::kPeerLostGrace);
  hold.Hold(5, clock.Now());
  clock.Advance(agent::kPeerLostGrace / 2);
  EXPECT_TRUE(hold.Due(clock.Now(), true).empty()) << "inside its grace";
  EXPECT_EQ(hold.DropEchoes(clock.Now()), 1u) << "the restart answers it";
  clock.Advance(agent::kPeerLostGrace);
  EXPECT_TRUE(hold.Due(clock.Now(), true).empty()) << "an echo is never reported";
}

// A trace or a diagnosis ends long before the agent: its thread is joined
// at the next Reap, so a month of traces holds no finished threads.
TEST(Workers, AFinishedThreadIsJoinedAtTheNextReapWhileARunningOneStays) {
  agent::Workers workers;
  std::atomic<bool> release{false}, quick_done{false};
  workers.Start([&] { quick_done = true; });
  workers.Start([&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  ASSERT_EQ(workers.running(), 2u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (workers.running() != 1 && std::chrono::steady_clock::now() < deadline) {
    workers.Reap();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(quick_done);
  EXPECT_EQ(workers.running(), 1u) << "the finished one joined, the running one kept";
  release = true;
  while (workers.running() != 0 && std::chrono::steady_clock::now() < deadline) {
    workers.Reap();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(workers.running(), 0u);
}

TEST(Supervisor, TorchrunEnvIsComplete) {
  agent::RankGroupSpec s;
  s.generation = 3;
  s.world_size = 4;
  s.local_world_size = 2;
  s.master_addr = "127.0.0.1";
  s.master_port = 29503;
  s.env = {{"OMP_NUM_THREADS", "1"}};
  auto env = agent::TorchrunEnv(s, 3, 1);
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29503");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
}

TEST(Supervisor, ReportsExitCodeAndSignalOfRealProcesses) {
  const std::string dir = testing::MakeTempDir();
  agent::Supervisor sup(dir);
  agent::RankGroupSpec s;
  s.generation = 1;
  s.ranks = {{0, 0}, {1, 1}};
  s.world_size = 2;
  s.argv = {"/bin/sh", "-c", "echo rank $RANK; if [ $RANK = 0 ]; then exit 7; else kill -SEGV $$; fi"};
  ASSERT_TRUE(sup.Start(s).ok());
  std::vector<agent::RankExit> exits;
  for (int i = 0; i < 200 && exits.size() < 2; ++i) {
    for (auto& e : sup.Reap()) exits.push_back(e);
    usleep(10000);
  }
  ASSERT_EQ(exits.size(), 2u);
  for (const auto& e : exits) {
    if (e.rank == 0) {
      EXPECT_EQ(e.exit_code, 7);
    } else {
      EXPECT_EQ(e.signal, SIGSEGV);
    }
  }
  std::ifstream log(sup.LogPath(1));
  std::string all((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(all.find("rank 1"), std::string::npos);
}

// A watched process's end wakes the loop at once, leaves the zombie for
// the loop to reap (the exit status is the loop's to read), and a process
// watched from a later set wakes it again.
TEST(ExitWatcher, AWatchedProcessThatEndsWakesTheLoopAndStaysReapable) {
  std::atomic<int> wakes{0};
  agent::ExitWatcher w([&] { ++wakes; });
  if (!w.active()) GTEST_SKIP() << "this kernel has no pidfd_open";
  auto child = [] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::pause();
      ::_exit(0);
    }
    return pid;
  };
  auto wait_wakes = [&](int n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (wakes.load() < n && std::chrono::steady_clock::now() < deadline) usleep(1000);
    return wakes.load();
  };
  const pid_t a = child();
  ASSERT_GT(a, 0);
  w.Watch({a});
  ::kill(a, SIGKILL);
  EXPECT_EQ(wait_wakes(1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(a, &status, 0), a) << "the watcher must not reap";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  const pid_t b = child();
  ASSERT_GT(b, 0);
  w.Watch({b});
  ::kill(b, SIGTERM);
  EXPECT_EQ(wait_wakes(2), 2);
  EXPECT_EQ(::waitpid(b, &status, 0), b);
}

// The rank link's step line survives the trip, non-finite values included;
// a malformed one is refused by name.
TEST(RankLink, StepSignalsRoundTripAndBadLinesAreRefused) {
  rank_client::StepSignal s;
  s.step = 42;
  s.steps = 3;
  s.loss = 3.25;
  s.grad_norm = std::nan("");
  s.local_grad_norm = INFINITY;
  s.step_ms = 101.5;
  s.compute_ms = 80.25;
  s.comm_ms = 12.5;
  s.local_nonfinite = true;
  s.nonfinite = true;
  s.halted = "nan";
  s.observed_ms = 1763840000123;
  Result<rank_client::StepSignal> back = rank_client::StepSignal::Parse(s.Format());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 42);
  EXPECT_EQ(back->steps, 3);
  EXPECT_DOUBLE_EQ(back->loss, 3.25);
  EXPECT_TRUE(std::isnan(back->grad_norm));
  EXPECT_TRUE(std::isinf(back->local_grad_norm));
  EXPECT_TRUE(back->local_nonfinite && back->nonfinite);
  EXPECT_EQ(back->halted, "nan");
  EXPECT_EQ(back->observed_ms, 1763840000123);
  EXPECT_TRUE(back->anomalous());
  EXPECT_EQ(back->tokens, 0);
  // Tokens travel as a 14th word only when known: a 13-word line (the Python
  // client's, an older trainer's) still parses.
  const std::string line = s.Format();
  EXPECT_EQ(line.substr(line.size() - 14), " 1763840000123") << line;
  s.tokens = 16384;
  Result<rank_client::StepSignal> with = rank_client::StepSignal::Parse(s.Format());
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(with->tokens, 16384);
  // The device time is a 15th word, after the tokens (0 when unknown).
  s.tokens = 0;
  s.device_ms = 61.5;
  Result<rank_client::StepSignal> device = rank_client::StepSignal::Parse(s.Format());
  ASSERT_TRUE(device.ok()) << device.status().ToString() << " " << s.Format();
  EXPECT_EQ(device->tokens, 0);
  EXPECT_DOUBLE_EQ(device->device_ms, 61.5);
  EXPECT_DOUBLE_EQ(device->compute_ms, 80.25);
  for (const char* bad : {"STEP 1 2", "STEP x 1 1 1 1 1 1 1 0 0 - 5", "STEP 1 1 1 1 1 1 1 1 0 0 maybe 5", "HELLO 1 2",
                          "STEP 1 1 1 1 1 1 1 1 0 0 - 5 -3", "STEP 1 1 1 1 1 1 1 1 0 0 - 5 7 -8",
                          "STEP 1 1 1 1 1 1 1 1 0 0 - 5 7 8 9"}) {
    Result<rank_client::StepSignal> r = rank_client::StepSignal::Parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("rank link"), std::string::npos) << r.status().message();
  }
}

TEST(Inspector, AStoppedRankIsReportedOncePerEpisode) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ::kill(child, SIGSTOP);
  ::usleep(50 * 1000);
  agent::StuckRanks stuck(std::chrono::seconds(10));
  const auto t0 = agent::StuckRanks::Clock::now();
  EXPECT_TRUE(stuck.Check({{3, child}}, t0).empty()) << "not stuck long enough yet";
  auto found = stuck.Check({{3, child}}, t0 + std::chrono::seconds(11));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].first, 3);
  EXPECT_NE(found[0].second.find("stopped (T) for 11 s"), std::string::npos) << found[0].second;
  EXPECT_TRUE(stuck.Check({{3, child}}, t0 + std::chrono::seconds(20)).empty()) << "once per episode";
  ::kill(child, SIGCONT);
  ::usleep(50 * 1000);
  EXPECT_TRUE(stuck.Check({{3, child}}, t0 + std::chrono::seconds(21)).empty());
  // A START_RANKS's limit (the policy's process_stuck) replaces the default.
  stuck.set_limit(std::chrono::seconds(3));
  ::kill(child, SIGSTOP);
  ::usleep(50 * 1000);
  EXPECT_TRUE(stuck.Check({{3, child}}, t0 + std::chrono::seconds(22)).empty());
  EXPECT_EQ(stuck.Check({{3, child}}, t0 + std::chrono::seconds(25)).size(), 1u) << "stuck after the 3 s given";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

// A busy process stopped 80% of the time in 100 ms periods (a rank that a
// debugger or a job-control signal keeps stopping) is caught in T often,
// but it keeps gaining CPU time, so it is never stuck; the same process
// stopped for good is.
TEST(Inspector, ARankThatRunsBetweenReadingsIsNotStuck) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (volatile uint64_t i = 0;; ++i) {
    }
  }
  std::atomic<bool> cycling{true};
  std::thread duty([&] {
    while (cycling) {
      ::kill(child, SIGCONT);
      ::usleep(20 * 1000);
      ::kill(child, SIGSTOP);
      ::usleep(80 * 1000);
    }
    ::kill(child, SIGCONT);
  });
  agent::StuckRanks stuck(std::chrono::seconds(10));
  const auto t0 = agent::StuckRanks::Clock::now();
  int seen_stopped = 0;
  for (int i = 0; i <= 12; ++i) {
    ::usleep(250 * 1000);
    seen_stopped += ProcessState(child) == 'T' ? 1 : 0;
    EXPECT_TRUE(stuck.Check({{3, child}}, t0 + std::chrono::seconds(i)).empty()) << "reading " << i;
  }
  cycling = false;
  duty.join();
  // Stopped 80% of the time: a reading that never saw it stopped did not
  // test what this test claims.
  EXPECT_GE(seen_stopped, 3) << "the process was caught stopped in only " << seen_stopped << " of 13 readings";
  ::kill(child, SIGSTOP);
  ::usleep(50 * 1000);
  EXPECT_TRUE(stuck.Check({{3, child}}, t0 + std::chrono::seconds(20)).empty());
  EXPECT_EQ(stuck.Check({{3, child}}, t0 + std::chrono::seconds(31)).size(), 1u) << "stopped for good: stuck";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  std::printf("[ figure ] the duty-cycled process was caught stopped in %d of 13 readings\n", seen_stopped);
}

TEST(Inspector, EmulatedDeviceAndNicAreRead) {
  const std::string dir = testing::MakeTempDir();
  agent::InspectorPaths p{dir + "/device", dir + "/nic", dir};
  EXPECT_TRUE(agent::Inspect(p).device_ok);  // no file: nothing reported an error
  std::ofstream(p.device) << "Xid 48: uncorrectable ECC error\n";
  std::ofstream(p.nic) << "down\n";
  auto h = agent::Inspect(p);
  EXPECT_FALSE(h.device_ok);
  EXPECT_EQ(h.device_detail, "Xid 48: uncorrectable ECC error");
  EXPECT_FALSE(h.nic_up);
  ASSERT_TRUE(cluster::Repair(p.Hardware()).ok());
  EXPECT_TRUE(agent::Inspect(p).device_ok);
  EXPECT_TRUE(agent::Inspect(p).nic_up);
}

// Given the machine's interface, the link is the kernel's view (sysfs),
// and the emulated file is not read. A fake sysfs tree plays each state; the
// host's own loopback is read for real ("unknown", with carrier: up).
TEST(Inspector, TheKernelsViewOfTheInterfaceIsTheLink) {
  const std::string dir = testing::MakeTempDir(), net = dir + "/net";
  auto link = [&](const std::string& oper, const std::string& carrier, int changes) {
    ASSERT_EQ(::system(("mkdir -p " + net + "/eth9/statistics").c_str()), 0);
    std::ofstream(net + "/eth9/operstate") << oper << "\n";
    std::ofstream(net + "/eth9/carrier") << carrier << "\n";
    std::ofstream(net + "/eth9/carrier_changes") << changes << "\n";
    std::ofstream(net + "/eth9/statistics/rx_errors") << "7\n";
  };
  agent::InspectorPaths p{dir + "/device", dir + "/nic", dir, "eth9", net};
  std::ofstream(p.nic) << "down\n";  // ignored: an interface is watched
  link("up", "1", 2);
  agent::HealthReading h = agent::Inspect(p);
  EXPECT_TRUE(h.nic_up) << h.nic_detail;
  ASSERT_TRUE(h.link.has_value());
  EXPECT_EQ(h.link->rx_errors, 7u);
  EXPECT_EQ(h.nic_detail, "eth9 up (operstate up, 2 carrier changes)");
  const agent::LinkReading before = *h.link;
  link("lowerlayerdown", "0", 3);  // the peer's end went down
  h = agent::Inspect(p);
  EXPECT_FALSE(h.nic_up);
  EXPECT_EQ(h.nic_detail, "eth9 down (operstate lowerlayerdown, no carrier, 3 carrier changes)");
  link("up", "1", 6);  // down and up twice since `before`, up at both readings
  EXPECT_EQ(agent::FlapsBetween(before, *agent::Inspect(p).link), 4u);

  p.interface = "nosuch0";
  h = agent::Inspect(p);
  EXPECT_FALSE(h.nic_up);
  EXPECT_NE(h.nic_detail.find("network interface 'nosuch0' not found under " + net), std::string::npos) << h.nic_detail;

  Result<agent::LinkReading> lo = agent::ReadLink("/sys/class/net", "lo");
  ASSERT_TRUE(lo.ok()) << lo.status().ToString();
  EXPECT_TRUE(agent::LinkUp(*lo)) << agent::DescribeLink(*lo);
}

}  // namespace
}  // namespace bulwark
