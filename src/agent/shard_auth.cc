#include "agent/shard_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "agent/shard_transfer.h"
#include "rank_client/shard_socket.h"

namespace bulwark::agent {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += {d[p[i] >> 4], d[p[i] & 15]};
  return s;
}

Result<std::string> Nonce() {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof b) != 1) return Status::Internal("no randomness for a shard-transfer nonce");
  return Hex(b, sizeof b);
}

bool Same(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Status Line(int fd, const std::string& s) { return SendAll(fd, s.data(), s.size()); }

}  // namespace

std::string ShardProof(const std::string& token, const std::string& role, const std::string& nonce) {
  const std::string msg = "bulwark-shard " + role + " " + nonce;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), mac, &n);
  return Hex(mac, n);
}

Status AcceptPeer(int fd, const std::string& token) {
  auto nonce = Nonce();
  if (!nonce.ok()) return nonce.status();
  BULWARK_RETURN_IF_ERROR(Line(fd, "HELLO " + *nonce + "\n"));
  auto line = RecvLine(fd);
  if (!line.ok()) return Status::PermissionDenied("no AUTH line: " + line.status().message());
  auto w = rank_client::SplitWords(*line);
  if (w.size() != 3 || w[0] != "AUTH") {
    (void)Line(fd, "DENIED expected AUTH <proof> <nonce>\n");
    return Status::PermissionDenied("no AUTH line (got '" + line->substr(0, 40) + "')");
  }
  if (token.empty() || !Same(w[1], ShardProof(token, "client", *nonce))) {
    (void)Line(fd, "DENIED wrong cluster token\n");
    return Status::PermissionDenied("wrong cluster token");
  }
  return Line(fd, "OK " + ShardProof(token, "server", w[2]) + "\n");
}

Status AuthenticateToPeer(int fd, const std::string& token) {
  auto hello = RecvLine(fd);
  if (!hello.ok()) return hello.status();
  auto w = rank_client::SplitWords(*hello);
  if (w.size() != 2 || w[0] != "HELLO") return Status::PermissionDenied("peer did not greet with HELLO: '" + hello->substr(0, 40) + "'");
  auto mine = Nonce();
  if (!mine.ok()) return mine.status();
  BULWARK_RETURN_IF_ERROR(Line(fd, "AUTH " + ShardProof(token, "client", w[1]) + " " + *mine + "\n"));
  auto answer = RecvLine(fd);
  if (!answer.ok()) return answer.status();
  auto a = rank_client::SplitWords(*answer);
  if (a.size() < 2 || a[0] != "OK") return Status::PermissionDenied("peer refused us: " + *answer);
  if (!Same(a[1], ShardProof(token, "server", *mine))) {
    return Status::PermissionDenied("peer could not prove it holds the cluster token");
  }
  return Status::OK();
}

}  // namespace bulwark::agent
