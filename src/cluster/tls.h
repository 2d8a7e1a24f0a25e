// Mutual TLS for the control plane (controller <-> agents <-> CLI).
//
// `bulwark up --tls` makes a cluster CA and two certificates with openssl:
// one for the controller (valid for 127.0.0.1, localhost and the address it
// listens on, such as the bridge of machines in namespaces) and one that
// agents and the CLI present. They live in DIR/tls/ (keys 0600). Whoever
// opens the cluster directory uses TLS when DIR/tls/ca.pem exists: the
// controller then requires and verifies a client certificate, so nothing
// without the cluster's certificate gets as far as the token check. Without
// DIR/tls/ the plane speaks plaintext gRPC on loopback, as before.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "cluster/layout.h"
#include "common/status.h"

namespace bulwark::cluster {

// Creates DIR/tls/ with a fresh CA and certificates; the controller's also
// names `listen` (an IP address) when it is not loopback. FailedPrecondition
// naming the package when openssl is missing.
Status CreateClusterTls(const Layout& layout, const std::string& listen = "127.0.0.1");

bool TlsEnabled(const Layout& layout);

// TLS credentials when the cluster has them, else insecure ones; an error
// when DIR/tls/ exists but a file in it cannot be read.
Result<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const Layout& layout);
Result<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const Layout& layout);

}  // namespace bulwark::cluster
