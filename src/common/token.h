// The cluster token: a shared secret that agents and mutating CLI calls
// present to the controller. `bulwark up` creates it; it lives in a 0600
// file so that only the cluster's owner can act on the cluster.
#pragma once

#include <string>

#include "common/status.h"

namespace bulwark {

// The gRPC metadata key that carries the token.
constexpr const char* kTokenMetadataKey = "x-bulwark-token";

// Writes a fresh random token to `path` with mode 0600 and returns it.
Result<std::string> CreateToken(const std::string& path);
// Reads the token at `path`; NotFound says how to get one, FailedPrecondition
// refuses a file that others can read.
Result<std::string> ReadToken(const std::string& path);

}  // namespace bulwark
