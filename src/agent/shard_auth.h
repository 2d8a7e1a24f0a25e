// ShardAuth: agents prove to each other that they belong to the cluster
// before any shard crosses between them.
//
// Anyone who can reach a shard port could otherwise fetch model state, push
// images that become restore candidates, or make an agent allocate large
// regions. Each connection therefore starts with a mutual challenge keyed by
// the cluster token (common/token.h), which never crosses the wire:
//
//   server -> HELLO <server-nonce>\n
//   client -> AUTH <HMAC(token, "client" server-nonce)> <client-nonce>\n
//   server -> OK <HMAC(token, "server" client-nonce)>\n    or  DENIED <why>\n
//
// HMAC-SHA256 (OpenSSL); nonces are 16 random bytes, so a recorded exchange
// cannot be replayed against a new connection.
#pragma once

#include <string>

#include "common/status.h"

namespace bulwark::agent {

// Server side, right after accept. PermissionDenied (after telling the
// peer) when the peer does not prove it holds `token`.
Status AcceptPeer(int fd, const std::string& token);

// Client side, right after connecting. PermissionDenied when the server
// refuses us or cannot prove it holds `token` itself.
Status AuthenticateToPeer(int fd, const std::string& token);

// Exposed for tests: the proof a holder of `token` gives for `nonce`.
std::string ShardProof(const std::string& token, const std::string& role, const std::string& nonce);

}  // namespace bulwark::agent
