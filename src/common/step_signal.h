// What a rank says about its steps, as one list of fields.
//
// A rank's step figures travel three hops: the rank's link line
// (rank_client::StepSignal, client/rank_link.h), the agent's report to the
// controller (wire::RankSignal, proto/bulwark.proto) and the detectors'
// input (controller::RankSignal, controller/signals.h). The two structs
// derive from StepFigures, and the hop through the wire copies by the field
// list below, by name, into and out of the protobuf message's fields of the
// same names: a field is added here (and to the .proto), once.
#pragma once

#include <cstdint>
#include <string>

namespace bulwark {

struct StepFigures {
  int64_t step = 0;  // the newest step in the run
  int steps = 1;     // how many steps the *_ms fields sum (the agent sums runs)
  double loss = 0, grad_norm = 0;
  double local_grad_norm = 0;  // this rank's gradients before the all-reduce
  // compute_ms is the wall time of the rank's own work (waits for
  // neighbours excluded); device_ms the same work's device time, which the
  // host's other processes do not change: on a CPU the CPU time it took
  // (local machines share cores, and a rank waiting for one is not slow),
  // on a GPU the compute's time. 0: not reported.
  double step_ms = 0, compute_ms = 0, comm_ms = 0, device_ms = 0;
  bool local_nonfinite = false;  // a non-finite value in this rank's own loss or gradients
  bool nonfinite = false;        // the global loss or grad norm was non-finite
  // The rank held the step back (did not apply the update) and waits for a
  // decision: "nan" or "spike". Empty: the step was applied.
  std::string halted;
  // Tokens the whole job processed in these steps (bulwark-train: batch x
  // context x data-parallel ranks), for the controller's tokens/s; 0: unknown.
  int64_t tokens = 0;

  // v(name, s.field) for each field, in declaration order; the names are
  // wire::RankSignal's.
  template <class S, class V>
  static void Fields(S& s, V& v) {
    v("step", s.step), v("steps", s.steps);
    v("loss", s.loss), v("grad_norm", s.grad_norm), v("local_grad_norm", s.local_grad_norm);
    v("step_ms", s.step_ms), v("compute_ms", s.compute_ms), v("comm_ms", s.comm_ms);
    v("local_nonfinite", s.local_nonfinite), v("nonfinite", s.nonfinite);
    v("halted", s.halted), v("tokens", s.tokens), v("device_ms", s.device_ms);
  }
};

// Copies the figures into, and out of, a protobuf message that has fields
// of the same names and types (wire::RankSignal), through the message's
// reflection. A template so that this header needs no protobuf: only the
// agent and the plane, which have the message, instantiate it. A name the
// message lacks is a bug caught by the wire round-trip test
// (control_store_test: StepSignalWire).
template <class Message>
struct StepFiguresToMessage {
  Message* m;
  const auto* Field(const char* name) const { return m->GetDescriptor()->FindFieldByName(name); }
  void operator()(const char* name, int64_t x) { m->GetReflection()->SetInt64(m, Field(name), x); }
  void operator()(const char* name, int x) { m->GetReflection()->SetInt32(m, Field(name), x); }
  void operator()(const char* name, double x) { m->GetReflection()->SetDouble(m, Field(name), x); }
  void operator()(const char* name, bool x) { m->GetReflection()->SetBool(m, Field(name), x); }
  void operator()(const char* name, const std::string& x) { m->GetReflection()->SetString(m, Field(name), x); }
};
template <class Message>
struct StepFiguresFromMessage {
  const Message& m;
  const auto* Field(const char* name) const { return m.GetDescriptor()->FindFieldByName(name); }
  void operator()(const char* name, int64_t& x) { x = m.GetReflection()->GetInt64(m, Field(name)); }
  void operator()(const char* name, int& x) { x = m.GetReflection()->GetInt32(m, Field(name)); }
  void operator()(const char* name, double& x) { x = m.GetReflection()->GetDouble(m, Field(name)); }
  void operator()(const char* name, bool& x) { x = m.GetReflection()->GetBool(m, Field(name)); }
  void operator()(const char* name, std::string& x) { x = m.GetReflection()->GetString(m, Field(name)); }
};
template <class Message>
void CopyToMessage(const StepFigures& s, Message* m) {
  StepFiguresToMessage<Message> v{m};
  StepFigures::Fields(s, v);
}
template <class Message>
void CopyFromMessage(const Message& m, StepFigures* s) {
  StepFiguresFromMessage<Message> v{m};
  StepFigures::Fields(*s, v);
}

}  // namespace bulwark
