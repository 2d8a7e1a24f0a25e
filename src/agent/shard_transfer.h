// Shard transfer between agents: a plain TCP stream, one request per
// connection, so that tens of megabytes a step go from one machine's shared
// memory into another's with one kernel copy each way and no re-encoding.
//
//   PUSH <rank> <step> <bytes>\n <image>     ->  OK\n
//   FETCH <rank>\n                           ->  COPIES <n>\n, then n times COPY <bytes>\n <image>
#pragma once

#include <string>

#include "common/status.h"

namespace bulwark::agent {

// Blocking socket helpers with a deadline per call (seconds).
Result<int> DialTcp(const std::string& host_port, int timeout_s);
Result<int> ListenTcp(const std::string& host, int* port);
Status SendAll(int fd, const void* data, size_t n);
Status RecvAll(int fd, void* data, size_t n);
Result<std::string> RecvLine(int fd);
void SetTimeouts(int fd, int seconds);

}  // namespace bulwark::agent
