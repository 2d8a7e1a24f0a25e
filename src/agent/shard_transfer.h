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
//
// A dial gives up on an address that does not answer after `connect_ms`
// (default: `timeout_s`), with "no answer within" in its message; each send
// and receive on the socket it returns then has `timeout_s`.
Result<int> DialTcp(const std::string& host_port, int timeout_s, int connect_ms = -1);
// The same in two steps, for a caller that must be able to cancel the dial
// from another thread: it owns the socket from before the connect, and a
// shutdown(2) of it ends the connect (or any transfer after it) at once.
Result<int> TcpSocket();
Status ConnectTcp(int fd, const std::string& host_port, int timeout_s, int connect_ms);
Result<int> ListenTcp(const std::string& host, int* port);
Status SendAll(int fd, const void* data, size_t n);
Status RecvAll(int fd, void* data, size_t n);
Result<std::string> RecvLine(int fd);
void SetTimeouts(int fd, int seconds);

}  // namespace bulwark::agent
