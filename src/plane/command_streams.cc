#include "plane/command_streams.h"

#include <chrono>
#include <utility>

#include "common/log.h"
#include "plane/call_token.h"
#include "plane/kill_point.h"
#include "plane/plane.h"

namespace bulwark::plane {
namespace {

constexpr int kQueues = 2;
// Calls asked for ahead on each queue: a burst of agents reconnecting
// (a restarted controller) is taken this many at a time per queue.
constexpr int kWaitingPerQueue = 32;

}  // namespace

// One agent's Commands call. Created waiting for a call; deletes itself
// once the call is over and every operation it started has come back.
//
// Each operation's completion comes back on the stream's queue as one of
// its Tags. Its reaction runs on the owner's serial thread, all of one
// stream's in order, so the stream's fields need no lock; only asking for
// the next call happens at once, on the queue's thread.
//
// The stream's turn (see Plane::TakeCommand) is held by one party at a
// time: a task of this stream's, gRPC while a write is in flight, or the
// plane while parked. Whoever holds it when the call is over ends it, so
// Finish is called once.
class CommandStreams::Stream final : public Plane::CommandSink {
 public:
  struct Tag {
    Stream* stream;
    void (Stream::*react)(bool ok);
    void Fire(bool ok) { (stream->*react)(ok); }
  };

  Stream(CommandStreams* owner, grpc::ServerCompletionQueue* queue)
      : owner_(owner), queue_(queue), writer_(&ctx_) {
    ++owner_->live_;
    ctx_.AsyncNotifyWhenDone(&done_tag_);
    owner_->service_->RequestCommands(&ctx_, &req_, &writer_, queue_, queue_, &call_tag_);
  }
  ~Stream() { --owner_->live_; }

  // From the plane, once its lock is released.
  void Deliver(wire::Command c) override { Write(std::move(c)); }
  void Superseded() override {
    Finish(grpc::Status(grpc::StatusCode::ABORTED, "a newer command stream replaced this one"));
  }

 private:
  // A call began, or (not ok) the server shuts down before one did: then
  // nothing else was started, not even the wait for the call's end.
  void OnCall(bool ok) {
    if (!ok) {
      delete this;
      return;
    }
    owner_->Await(queue_);
    owner_->serial_.Post([this] { Begin(); });
  }
  void Begin() {
    machine_ = req_.machine();
    if (grpc::Status st = CheckToken(&ctx_, owner_->token_, "Commands"); !st.ok()) {
      Finish(std::move(st));
      return;
    }
    plane_ = owner_->fleet_->For(machine_);
    stream_ = plane_->OpenStream(machine_);
    Next();
  }

  void OnWritten(bool ok) {
    owner_->serial_.Post([this, ok] { Written(ok); });
  }
  void Written(bool ok) {
    if (!ok) {
      // A desired-state command is resent on the next stream anyway; a
      // one-time command taken off its queue would be lost. (Seen: an
      // injection dropped while an agent's stream was reconnecting.)
      if (cmd_.id() != sent_) plane_->Requeue(machine_, std::move(cmd_));
      plane_->CloseStream(machine_, stream_);
      Finish(grpc::Status::OK);
      return;
    }
    KillPointSent(wire::Command::Kind_Name(cmd_.kind()), machine_, cmd_.generation());
    Next();
  }

  // The call is over: ended by our Finish, or cancelled (the agent went
  // away, its deadline passed, or the server shuts down). Cancelled while
  // parked, the turn comes back here, and so does ending the call.
  void OnDone(bool) {
    owner_->serial_.Post([this] {
      done_ = true;
      if (ctx_.IsCancelled() && plane_ != nullptr && plane_->CloseStream(machine_, stream_)) {
        Finish(grpc::Status::OK);
      }
      DeleteIfOver();
    });
  }
  void OnFinished(bool) {
    owner_->serial_.Post([this] {
      finished_ = true;
      DeleteIfOver();
    });
  }
  void DeleteIfOver() {
    if (done_ && finished_) delete this;
  }

  void Next() {
    wire::Command c;
    switch (plane_->TakeCommand(machine_, stream_, &sent_, this, &c)) {
      case Plane::Turn::kWrite: Write(std::move(c)); return;
      case Plane::Turn::kParked: return;
      case Plane::Turn::kSuperseded: Superseded(); return;
      case Plane::Turn::kClosed: Finish(grpc::Status::OK); return;
    }
  }
  void Write(wire::Command c) {
    cmd_ = std::move(c);
    writer_.Write(cmd_, &write_tag_);
  }
  void Finish(grpc::Status st) { writer_.Finish(st, &finish_tag_); }

  CommandStreams* const owner_;
  grpc::ServerCompletionQueue* const queue_;
  grpc::ServerContext ctx_;
  wire::CommandStreamRequest req_;
  grpc::ServerAsyncWriter<wire::Command> writer_;
  Tag call_tag_{this, &Stream::OnCall};
  Tag write_tag_{this, &Stream::OnWritten};
  Tag done_tag_{this, &Stream::OnDone};
  Tag finish_tag_{this, &Stream::OnFinished};
  bool done_ = false, finished_ = false;
  std::string machine_;
  Plane* plane_ = nullptr;
  int64_t stream_ = 0;
  std::string sent_;   // the id of the last desired command written (the plane updates it)
  wire::Command cmd_;  // the command being written
};

CommandStreams::CommandStreams(Service* service, Fleet* fleet, std::string token)
    : service_(service), fleet_(fleet), token_(std::move(token)) {}

CommandStreams::~CommandStreams() { Stop(); }

void CommandStreams::AddQueues(grpc::ServerBuilder* builder) {
  for (int i = 0; i < kQueues; ++i) queues_.push_back(builder->AddCompletionQueue());
}

void CommandStreams::Start() {
  for (const auto& q : queues_) {
    for (int i = 0; i < kWaitingPerQueue; ++i) Await(q.get());
    pollers_.emplace_back([q = q.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (q->Next(&tag, &ok)) static_cast<Stream::Tag*>(tag)->Fire(ok);
    });
  }
}

void CommandStreams::Await(grpc::ServerCompletionQueue* queue) {
  // Under the lock: a call asked for after StopAccepting could come back
  // on a queue already shut down, which gRPC does not allow.
  MutexLock lock(&mu_);
  if (accepting_) new Stream(this, queue);
}

void CommandStreams::StopAccepting() {
  MutexLock lock(&mu_);
  accepting_ = false;
}

void CommandStreams::Stop() {
  if (stopped_) return;
  stopped_ = true;
  StopAccepting();
  // The server's Shutdown has ended every call; the last reactions may
  // still be on their way to delete their streams, and a stream still
  // alive could start an operation on a queue shut down.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (live_ > 0 && !pollers_.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (live_ > 0 && !pollers_.empty()) {
    Logger("controller").Warn(std::to_string(live_.load()) + " command streams outlived the server's shutdown");
  }
  for (const auto& q : queues_) q->Shutdown();
  for (std::thread& t : pollers_) t.join();
  if (pollers_.empty()) {  // never started: drain here
    for (const auto& q : queues_) {
      void* tag = nullptr;
      bool ok = false;
      while (q->Next(&tag, &ok)) {
      }
    }
  }
}

}  // namespace bulwark::plane
