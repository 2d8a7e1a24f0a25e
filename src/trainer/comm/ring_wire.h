// What ring.cc and ring_ops.cc share: the frame every link carries and the
// socket helpers. Internal to the ring (ring.h is its interface).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace bulwark::trainer::ring_wire {

// Every message on a link: this header, then `len` bytes.
struct Frame {
  uint32_t magic = 0x62776b72;  // "bwkr"
  uint32_t kind = 0;
  uint64_t nonce = 0;  // the generation's
  int64_t tag = 0;     // a collective's step, a message's tag, an IDENT's channel
  uint64_t len = 0;
};

enum Kind : uint32_t { kIdent = 1, kHello = 2, kData = 3, kAbort = 4 };
constexpr int kRingChannel = 0, kPointChannel = 1;  // a link's channel

double Now();                  // seconds, steady clock
int MsLeft(double deadline);   // for poll: 0 once it passed
std::string Errno(const char* what);
// Writes all of [p, p + n) to a non-blocking socket by the deadline, or
// until `cancel` is set (looked at every 100 ms); `done` says how far it got.
Status WriteAll(int fd, const char* p, size_t n, double deadline, size_t* done,
                const std::atomic<bool>* cancel = nullptr);
// Connects to `peer` ("addr:port") on `channel` and says who this is.
Result<int> Dial(const std::string& self, const std::string& peer, int channel, double deadline);

}  // namespace bulwark::trainer::ring_wire
