// Fuzzes the controller's decoding of what it journals (plane/codec.h): the
// job's launch spec and the journal rows replayed after a restart, whose
// events are the agents' reports (rank exits, inspections, steps, restores)
// and the detectors' findings. Each input line is one row, replayed as
// Plane::Rebuild does into a Controller, so decoded values that are
// well-formed JSON but hostile (negative ranks, unknown machines, time
// running backwards) reach the policy too. A line that decodes as a launch
// spec becomes the spec of the next "create" row.
//
// Also checks the property replay depends on: an event that decodes
// re-encodes to JSON that decodes to the same encoding.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "controller/controller.h"
#include "plane/codec.h"

using namespace bulwark;
using namespace bulwark::controller;
using namespace bulwark::plane;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  JobSpec spec;
  spec.id = "fuzz";
  spec.world_size = 4;
  spec.ranks_per_machine = 2;
  spec.command = "bulwark-train";
  std::optional<Controller> controller;
  Time now = TimeFromMs(0);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    now += std::chrono::seconds(1);

    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.is_object() && j.contains("world_size")) {
      Result<JobLaunch> l = DecodeLaunch(j);
      // Only a spec the plane would accept (Submit validates it) is used.
      if (l.ok() && l->spec.Validate().ok() && l->spec.MachinesNeeded() <= 64) spec = l->spec;
      continue;
    }
    Result<JournalRow> row = DecodeJournalRow(line);
    if (!row.ok()) continue;
    if (row->event) {
      const nlohmann::json once = EncodeEvent(*row->event);
      Result<Event> again = DecodeEvent(once);
      if (!again.ok() || EncodeEvent(*again) != once) __builtin_trap();
    }
    if (row->type == "create") {
      // A fleet as large as the machines' names the row lists: a journal
      // names at most the cluster's machines.
      if (row->standbys.size() > 256) continue;
      Result<Controller> c = Controller::Create(spec, PolicyConfig{}, row->standbys, now);
      if (c.ok()) controller.emplace(std::move(*c));
    } else if (!controller) {
      continue;
    } else if (row->type == "reconcile") {
      // The harness looks for crashes: a refusal is a valid answer to a
      // mangled journal, so what the controller says is not checked.
      controller->Reconcile(now).IgnoreError();
    } else if (row->type == "event") {
      controller->Handle(*row->event, now).IgnoreError();  // as above
    }
  }
  if (controller) {
    controller->Cumulative(now);
    controller->standby();
  }
  return 0;
}
