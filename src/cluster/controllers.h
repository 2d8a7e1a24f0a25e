// Every controller's address, and which of them to try next.
//
// With several controllers (`bulwark up --ha`, docs/control-plane.md) only
// the leader acts. Agents and the CLI are given all of them and find the
// leader themselves: a follower refuses with the leader's address in the
// reply's trailing metadata (kLeaderMetadataKey) and the caller moves
// there; an address that does not answer is skipped for the next one. So a
// failover needs no file rewritten by the new leader.
#pragma once

#include <string>
#include <vector>

#include "cluster/layout.h"

namespace bulwark::cluster {

// Trailing metadata of a follower's refusal: the leader's address ("" or
// absent when the follower does not know one yet).
inline constexpr char kLeaderMetadataKey[] = "bulwark-leader";

// The controllers to try, in order: `flag` ("a,b,..." from --controller)
// when given; else DIR/controllers.addr (one address a line, written by
// `up --ha`); else DIR/controller.addr, the one controller. Empty when none
// is known.
std::vector<std::string> ControllerAddresses(const Layout& layout, const std::string& flag);

// Where to go after `failed` did not serve: the follower's `hint` when it
// gave one, else the next address of `list` after `failed` (the first when
// `failed` is not listed). `failed` itself when there is nowhere else.
std::string NextController(const std::vector<std::string>& list, const std::string& failed,
                           const std::string& hint);

}  // namespace bulwark::cluster
