// The rank <-> agent link for checkpoint shards: a Unix SOCK_SEQPACKET
// socket (message boundaries kept, descriptors passed with SCM_RIGHTS).
// Messages are one line of words; a region travels as a descriptor.
//
//   rank -> agent                      agent -> rank
//   RESTORE <rank> <world>             COPY <source> (+fd) ... DURABLE <dir> END
//   REGION <rank> <world> [PEERWRITES] (+fd)
//                                      OK | ERROR <why>   (PEERWRITES: the backup
//                                      peer writes this rank's backup itself)
//   SAVED <slot> <step>                RELEASED <slot>   (sent and persisted)
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::rank_client {

// The variable through which an agent tells its ranks where its socket is.
constexpr const char* kShardSocketEnv = "BULWARK_SHARD_SOCKET";
// The rank whose backup this rank holds (client/shard_client.h).
constexpr const char* kShardBackupOfEnv = "BULWARK_SHARD_BACKUP_OF";

Result<int> ConnectShardSocket(const std::string& path);
Result<int> ListenShardSocket(const std::string& path);

// Sends one message, with `fd` attached when it is >= 0.
Status SendShardMessage(int sock, const std::string& text, int fd = -1);
// Receives one message; `*fd` gets an attached descriptor or -1. Waits at
// most `timeout_ms` (-1: forever). Unavailable when the peer closed.
Result<std::string> RecvShardMessage(int sock, int* fd, int timeout_ms);

std::vector<std::string> SplitWords(const std::string& line);

}  // namespace bulwark::rank_client
