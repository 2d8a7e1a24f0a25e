#include "cluster/tls.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "common/files.h"

extern char** environ;

namespace bulwark::cluster {
namespace {

std::string TlsDir(const Layout& l) { return l.dir + "/tls"; }

// Runs openssl with `args`; its output goes to DIR/tls/openssl.log.
Status Openssl(const Layout& l, std::vector<std::string> args) {
  args.insert(args.begin(), "openssl");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = TlsDir(l) + "/openssl.log";
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "openssl", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    return Status::FailedPrecondition("--tls needs the openssl command (Debian package 'openssl'); install it");
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Internal("openssl " + args[1] + " failed; see " + log);
  }
  return Status::OK();
}

// A key pair and a certificate signed by the cluster CA.
Status Issue(const Layout& l, const std::string& name, const std::string& cn, const std::string& ext) {
  const std::string d = TlsDir(l) + "/";
  BULWARK_RETURN_IF_ERROR(Openssl(l, {"req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                      "-nodes", "-keyout", d + name + ".key", "-out", d + name + ".csr", "-subj",
                                      "/CN=" + cn}));
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(d + name + ".ext", ext));
  BULWARK_RETURN_IF_ERROR(Openssl(l, {"x509", "-req", "-in", d + name + ".csr", "-CA", d + "ca.pem", "-CAkey",
                                      d + "ca.key", "-CAcreateserial", "-out", d + name + ".pem", "-days", "3650",
                                      "-extfile", d + name + ".ext"}));
  ::chmod((d + name + ".key").c_str(), 0600);
  return Status::OK();
}

Result<std::string> Read(const Layout& l, const std::string& name) {
  Result<std::string> text = ReadFile(TlsDir(l) + "/" + name);
  if (!text.ok()) return text.status().Annotate("cluster TLS (" + TlsDir(l) + ", made by 'bulwark up --tls')");
  return text;
}

}  // namespace

Status CreateClusterTls(const Layout& l, const std::string& listen) {
  const std::string d = TlsDir(l);
  BULWARK_RETURN_IF_ERROR(MakeDirs(d));
  ::chmod(d.c_str(), 0700);
  BULWARK_RETURN_IF_ERROR(Openssl(l, {"req", "-x509", "-new", "-newkey", "ec", "-pkeyopt",
                                      "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", d + "/ca.key", "-out",
                                      d + "/ca.pem", "-days", "3650", "-subj", "/CN=bulwark cluster CA"}));
  ::chmod((d + "/ca.key").c_str(), 0600);
  // The controller's certificate names every address it is reached at:
  // loopback, and the address it listens on when that is another (the
  // bridge of machines in namespaces).
  std::string san = "IP:127.0.0.1,DNS:localhost";
  if (!listen.empty() && listen != "127.0.0.1") san += ",IP:" + listen;
  BULWARK_RETURN_IF_ERROR(
      Issue(l, "controller", "bulwark controller", "subjectAltName=" + san + "\nextendedKeyUsage=serverAuth\n"));
  return Issue(l, "member", "bulwark member", "extendedKeyUsage=clientAuth\n");
}

bool TlsEnabled(const Layout& l) { return PathExists(TlsDir(l) + "/ca.pem"); }

Result<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const Layout& l) {
  if (!TlsEnabled(l)) return grpc::InsecureServerCredentials();
  auto ca = Read(l, "ca.pem"), key = Read(l, "controller.key"), cert = Read(l, "controller.pem");
  for (const auto* r : {&ca, &key, &cert})
    if (!r->ok()) return r->status();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = *ca;
  o.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(o);
}

Result<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const Layout& l) {
  if (!TlsEnabled(l)) return grpc::InsecureChannelCredentials();
  auto ca = Read(l, "ca.pem"), key = Read(l, "member.key"), cert = Read(l, "member.pem");
  for (const auto* r : {&ca, &key, &cert})
    if (!r->ok()) return r->status();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = *ca;
  o.pem_private_key = *key;
  o.pem_cert_chain = *cert;
  return grpc::SslCredentials(o);
}

}  // namespace bulwark::cluster
