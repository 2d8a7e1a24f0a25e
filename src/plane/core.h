// The controller process (src/plane) around the pure core (src/controller).
//
// Two namespaces keep the line between them visible in code: bulwark::plane
// is this process, with its store, journal, gRPC services and actuator, all
// doing I/O; bulwark::controller is the pure core, which decides and never
// touches a file, socket, clock or thread (the core_purity test). The plane
// speaks the core's vocabulary (events, actions, state, time), so the core's
// names are visible here unqualified; a name the plane defines is never the
// core's.
#pragma once

namespace bulwark::controller {}

namespace bulwark::plane {
using namespace ::bulwark::controller;  // NOLINT: the core's vocabulary, by design (above)
}  // namespace bulwark::plane
