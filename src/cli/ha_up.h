// `bulwark up --ha` (issue 37): the local cluster's control plane as three
// etcd members and two controllers on this host, each with a network
// namespace of its own where namespaces are available, each controller with a
// directory of its own (DIR/controllers/ID: its pid, log, address and a
// copy of the token and the fence timeout) and each member likewise
// (DIR/etcd/N: etcd.pid, etcd.log, its data). The leader writes its
// address to DIR/controller.addr, which agents and the CLI read
// (plane/ha_controller.h).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "cli/args.h"
#include "cluster/layout.h"
#include "cluster/local/netns.h"
#include "control_client/control_client.h"

namespace bulwark::cli {

using control_client::ControlClient;

// The controllers' ids, c1 first: with namespaces, `up` makes each its own
// beside the machines' (cluster/local/netns.h), so that a partition cuts a
// controller off from etcd and the agents as it would a machine.
std::vector<std::string> HaControllerIds();
// The etcd members' ids (e0, e1, e2; member N's directory is DIR/etcd/N):
// each gets a namespace after the controllers', so that a partition or a
// kill takes one member from the others as it would on its own machine.
std::vector<std::string> HaEtcdIds();

// Starts the members, waits until each answers, then the controllers (the
// first leads), and returns a client of the leader. `listen`: the host the
// etcd members and the controllers listen on without namespaces. With
// `netns`, a member or a controller the plan names runs in its namespace
// and listens at its address there.
Result<ControlClient> StartHa(const Args& a, const cluster::Layout& layout, const std::string& self,
                              const std::string& listen, const cluster::NetnsPlan* netns);

// What `bulwark down` stops once the agents are gone: the controllers, then
// the etcd members (live pids only).
std::vector<pid_t> HaControllerPids(const cluster::Layout& layout);
std::vector<pid_t> HaEtcdPids(const cluster::Layout& layout);

}  // namespace bulwark::cli
