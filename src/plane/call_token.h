// The cluster token on a call: every call that changes something carries
// it (common/token.h), and one without it is refused and logged.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

namespace bulwark::plane {

// OK when the call's metadata holds `token`; else UNAUTHENTICATED, naming
// `call` and the fix, and a warning in the controller's log.
grpc::Status CheckToken(grpc::ServerContextBase* ctx, const std::string& token, const char* call);

}  // namespace bulwark::plane
