// The plane bench's simulated agents: each registers, holds a command
// stream, reports once a second and answers commands as an agent would, all
// asynchronous on one completion queue (plane_bench.h).
#include <algorithm>
#include <cstdio>
#include <thread>

#include "host_probe.h"
#include "plane_bench.h"

namespace plane_bench {

void Bench::SendRegister(int i) {
  auto* op = new Op(Op::kRegister, i);
  sims_[i].register_in_flight = true;
  Prepare(op->ctx, 30000);
  w::RegisterRequest req;
  req.set_machine(sims_[i].id);
  req.set_machine_dir(o_.dir + "/machines/" + sims_[i].id);
  req.set_incarnation(sims_[i].incarnation);
  auto rpc = StubFor(i).AsyncRegister(&op->ctx, req, CqFor(i));
  rpc->Finish(&op->reg_reply, &op->status, op);
}

void Bench::OpenStream(int i) {
  Sim& s = sims_[i];
  auto* st = new Stream;
  st->ctx.AddMetadata("x-bulwark-token", token_);
  w::CommandStreamRequest req;
  req.set_machine(s.id);
  req.set_incarnation(s.incarnation);
  auto* op = new Op(Op::kStreamStart, i);
  op->stream = st;
  st->reader = StubFor(i).PrepareAsyncCommands(&st->ctx, req, CqFor(i));
  s.stream = st;
  s.stream_open = true;
  st->reader->StartCall(op);
}

void Bench::SendReport(int i) {
  Sim& s = sims_[i];
  auto* op = new Op(Op::kReport, i);
  Prepare(op->ctx, 10000);
  w::ReportRequest req;
  req.set_machine(s.id);
  req.set_incarnation(s.incarnation);
  req.set_generation(s.generation);
  const int64_t now = WallMs();
  // One step a second, the same on every machine, until a hang freezes it.
  const bool frozen = frozen_step_ > 0 && (frozen_job_ < 0 || frozen_job_ == s.job);
  const int64_t step = frozen ? frozen_step_ : now / 1000;
  for (const w::AgentEvent& e : s.pending) *req.add_events() = e;
  if (s.generation > 0 && s.rank >= 0 && !s.crashed) {
    req.add_live_ranks(s.rank);
    w::RankSignal* sig = req.add_signals();
    sig->set_rank(s.rank);
    sig->set_step(step);
    sig->set_steps(1);
    sig->set_loss(2.0);
    sig->set_grad_norm(1.0);
    sig->set_local_grad_norm(1.0);
    sig->set_step_ms(1000);
    sig->set_compute_ms(800);
    sig->set_comm_ms(200);
    sig->set_observed_ms(now);
    sig->set_generation(s.generation);
    sig->set_tokens(4096);
    if (s.rank == 0) {
      w::AgentEvent* e = req.add_events();
      e->set_kind(w::AgentEvent::STEP);
      e->set_seq(++s.seq);
      e->set_step(step);
      e->set_observed_ms(now);
      e->set_generation(s.generation);
    }
  }
  s.report_in_flight = true;
  s.sends.push_back({now, 0});
  auto rpc = StubFor(i).AsyncReport(&op->ctx, req, CqFor(i));
  rpc->Finish(&op->reply, &op->status, op);
}

// What an agent does with a command, as far as the controller can tell:
void Bench::CrashLocked(int i, int64_t at_ms) {
  Sim& s = sims_[i];
  w::AgentEvent e;
  e.set_kind(w::AgentEvent::RANK_EXITED);
  e.set_seq(++s.seq);
  e.set_rank(s.rank);
  e.set_exit_code(1);
  e.set_observed_ms(at_ms);
  e.set_generation(s.generation);
  s.pending.push_back(std::move(e));
  s.crashed = true;
  if (!s.report_in_flight) SendReport(i);
  else s.news = true;
}

// START_RANKS starts its rank of the generation (a crash is over); STOP_RANKS
// leaves it idle; TRACE is answered with its rank's stack, the stuck rank's
// in compute while the others wait in the all-reduce; DIAGNOSE with every
// test passed but on the stuck rank's machine.
void Bench::Answer(int i, const w::Command& c) {
  Sim& s = sims_[i];
  switch (c.kind()) {
    case w::Command::START_RANKS:
      s.generation = c.generation();
      s.rank = c.ranks_size() > 0 ? c.ranks(0).rank() : -1;
      s.crashed = false;
      break;
    case w::Command::STOP_RANKS:
      s.rank = -1;
      break;
    case w::Command::TRACE: {
      auto* op = new Op(Op::kStacks, i);
      Prepare(op->ctx, 30000);
      w::StacksRequest req;
      req.set_machine(s.id);
      req.set_incarnation(s.incarnation);
      req.set_trace(c.id());
      if (s.rank >= 0) {
        w::RankStack* st = req.add_stacks();
        st->set_rank(s.rank);
        st->set_pid(100000 + i);
        st->set_text(s.stuck ? "#0 matmul_kernel\n#1 forward\n#2 train_step\n#3 main"
                             : "#0 gloo::AllreduceRing::run\n#1 allreduce\n#2 train_step\n#3 main");
        st->set_capture_ms(5);
      }
      auto rpc = StubFor(i).AsyncUploadStacks(&op->ctx, req, CqFor(i));
      rpc->Finish(&op->stacks_reply, &op->status, op);
      break;
    }
    case w::Command::DIAGNOSE: {
      w::AgentEvent e;
      e.set_kind(w::AgentEvent::DIAGNOSTICS);
      e.set_incident(c.incident());
      e.set_observed_ms(WallMs());
      for (const std::string& t : c.tests()) {
        w::TestResult* r = e.add_results();
        r->set_test(t);
        r->set_passed(!s.stuck);
        r->set_ms(10);
      }
      e.set_seq(++s.seq);
      s.pending.push_back(std::move(e));
      break;
    }
    default:
      break;
  }
}

void Bench::PollLoop(grpc::CompletionQueue* cq) {
  void* tag;
  bool ok;
  while (cq->Next(&tag, &ok)) {
    Op* op = static_cast<Op*>(tag);
    std::lock_guard<std::mutex> l(mu_);
    Sim& s = sims_[op->agent];
    switch (op->kind) {
      case Op::kRegister:
        s.register_in_flight = false;
        if (op->status.ok()) {
          s.registered = true;
          if (!s.stream_open) OpenStream(op->agent);
        } else if (!stop_) {
          std::fprintf(stderr, "register %s: %s\n", s.id.c_str(), op->status.error_message().c_str());
        }
        delete op;
        break;
      case Op::kStreamStart:
      case Op::kStreamRead: {
        Stream* st = op->stream;
        if (op->kind == Op::kStreamRead && ok) Answer(op->agent, st->cmd);
        if (ok) {
          op->kind = Op::kStreamRead;
          st->reader->Read(&st->cmd, op);
        } else {
          op->kind = Op::kStreamFinish;
          st->reader->Finish(&st->status, op);
        }
        break;
      }
      case Op::kStreamFinish:
        // A stream the controller ended (a restart): the next report
        // round reopens it, as an agent's loop would.
        if (s.stream == op->stream) {
          s.stream = nullptr;
          s.stream_open = false;
        }
        delete op->stream;
        delete op;
        break;
      case Op::kStacks:
        if (!op->status.ok() && !stop_) std::fprintf(stderr, "stacks %s: %s\n", s.id.c_str(), op->status.error_message().c_str());
        delete op;
        break;
      case Op::kReport: {
        s.report_in_flight = false;
        if (!s.sends.empty() && s.sends.back().answered_ms == 0) s.sends.back().answered_ms = WallMs();
        if (op->status.ok()) {
          s.acked = op->reply.acked_seq();
          s.pending.erase(std::remove_if(s.pending.begin(), s.pending.end(),
                                         [&](const w::AgentEvent& e) { return e.seq() <= s.acked; }),
                          s.pending.end());
          s.last_ok_ms = WallMs();
          if (reporting_) latencies_ms_.push_back(Secs(Clock::now() - op->start) * 1000);
        } else {
          if (++report_errors_ <= 3) {
            std::fprintf(stderr, "report %s: %s\n", s.id.c_str(), op->status.error_message().c_str());
          }
          if (op->status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
            s.registered = false;  // "register first"
          }
        }
        if (s.news && s.registered && !s.silent) {
          s.news = false;
          SendReport(op->agent);
        }
        delete op;
        break;
      }
    }
  }
}

// Each agent reports once a second at its own offset in the second.
void Bench::ScheduleLoop() {
  const auto t0 = Clock::now();
  int64_t tick = 0;
  const int64_t slots = 100;  // 10 ms slots
  while (!stop_) {
    const auto at = t0 + std::chrono::milliseconds(10 * tick);
    std::this_thread::sleep_until(at);
    const int slot = static_cast<int>(tick % slots);
    std::lock_guard<std::mutex> l(mu_);
    // The generator's own lag, which no controller could make up for: a
    // slot's reports sent more than a second late (this host's other load
    // starving this process) make those agents look silent.
    const double lag = Secs(Clock::now() - at);
    worst_lag_s_ = std::max(worst_lag_s_, lag);
    lagged_ticks_ += lag > 1.0;
    for (int i = slot; i < static_cast<int>(sims_.size()); i += slots) {
      Sim& s = sims_[i];
      if (s.silent) continue;
      if (!s.registered) {
        if (!s.report_in_flight && !s.register_in_flight && tick % 100 == slot) SendRegister(i);
        continue;
      }
      if (!s.stream_open) OpenStream(i);
      if (!s.report_in_flight) SendReport(i);
    }
    ++tick;
  }
}


}  // namespace plane_bench
