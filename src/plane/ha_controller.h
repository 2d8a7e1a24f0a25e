// The controller as one of several (`bulwark controller --etcd ENDPOINTS`):
// it campaigns for the leader lease (leader.h), serves as the ordinary
// controller (service.h) while it leads, with its journal in etcd
// (journal_etcd.h), and the moment its term is over -- the lease lost,
// etcd unreachable past the renew deadline -- it stops serving and acting
// and campaigns again. A follower waits on the leader key's deletion, so a
// resignation hands over at once and a crash after the lease's TTL.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "plane/service.h"

namespace bulwark::plane {

struct HaOptions {
  std::string endpoints;             // --etcd host:port[,host:port...]
  std::string prefix = "/bulwark/";  // --etcd-prefix: one per cluster
  std::string id;                    // --controller-id; "" -> hostname:pid
  // --etcd-lease: the TTL in seconds. 5: etcd electing a new raft leader
  // (its leader member lost) held renewals 1.0-3.2 s apart on a loaded
  // host, past the 2 s renew deadline a 3 s lease would give; a 5 s lease's
  // is 4 s (leader.h).
  int64_t lease_s = 5;
  // --cluster-dir: the cluster directory agents and the CLI read
  // controller.addr from; each new term writes this controller's address
  // there, so they follow the leader (agents re-read it on every
  // reconnect). "": publish nowhere.
  std::string cluster_dir;
};

// A TCP port that was free on every interface a moment ago (bound to 0 and
// released): for etcd members and a controller whose address must be known
// before it listens. -1 when none could be bound.
int FreeTcpPort();

// Serves until SIGTERM or SIGINT. etcd unreachable at start is an
// Unavailable error of one line naming the endpoints.
Status RunHaController(ControllerOptions options, const HaOptions& ha);

}  // namespace bulwark::plane
