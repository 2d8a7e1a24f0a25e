#include "common/token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/files.h"

namespace bulwark {

Result<std::string> CreateToken(const std::string& path) {
  unsigned char raw[24];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, raw, sizeof raw) != static_cast<ssize_t>(sizeof raw)) {
    if (fd >= 0) ::close(fd);
    return Status::IOError("/dev/urandom: cannot read random bytes for the cluster token");
  }
  ::close(fd);
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (unsigned char b : raw) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  // Created 0600 from the start: never readable by others, not even briefly.
  const int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) return Status::IOError("cluster token " + path + ": " + std::strerror(errno));
  ::fchmod(out, 0600);
  const std::string line = token + "\n";
  const bool ok = ::write(out, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(out) == 0;
  ::close(out);
  if (!ok) return Status::IOError("cluster token " + path + ": cannot write: " + std::strerror(errno));
  return token;
}

Result<std::string> ReadToken(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::NotFound("cluster token " + path + " is missing; it is made by 'bulwark up' "
                            "(pass the same --dir)");
  }
  if ((st.st_mode & 077) != 0) {
    return Status::FailedPrecondition("cluster token " + path + " is readable by others; "
                                      "run 'chmod 600 " + path + "'");
  }
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::string t = *text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) return Status::Corrupt("cluster token " + path + " is empty; run 'bulwark up' again");
  return t;
}

}  // namespace bulwark
