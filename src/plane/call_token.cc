#include "plane/call_token.h"

#include "common/log.h"
#include "common/token.h"

namespace bulwark::plane {

grpc::Status CheckToken(grpc::ServerContextBase* ctx, const std::string& token, const char* call) {
  static const Logger log("controller");
  const auto& md = ctx->client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it != md.end() && std::string(it->second.data(), it->second.size()) == token) return grpc::Status::OK;
  log.Warn(std::string("refused ") + call + " from " + ctx->peer() + ": " +
           (it == md.end() ? "no cluster token" : "wrong cluster token"));
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      std::string(call) + ": missing or wrong cluster token; pass the --dir the "
                                          "cluster was started with (bulwark up writes DIR/token)");
}

}  // namespace bulwark::plane
