// The table of log signatures that says why a rank died (config/signatures.tsv).
#pragma once

#include <regex>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::agent {

class SignatureTable {
 public:
  // Parses "NAME<TAB>REGEX" lines; '#' starts a comment line. InvalidArgument
  // names the file, the line and what is wrong with it.
  static Result<SignatureTable> Parse(const std::string& text, const std::string& source);
  static Result<SignatureTable> Load(const std::string& path);
  // config/signatures.tsv as it was when the agent was built.
  static Result<SignatureTable> Builtin();

  // Puts `other`'s entries before this table's: user extensions win.
  void Prepend(const SignatureTable& other);

  // The first signature (in table order) matching any of `lines`; "" for none.
  std::string Match(const std::vector<std::string>& lines) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string name;
    std::regex re;
  };
  std::vector<Entry> entries_;
};

// The peer address ("host:port") a rank's last output says it could not
// connect to, the last one named; "" for none. It reads bulwark-train's
// "connecting to ring peer H:P failed: ...", Gloo's "connect [H]:P: ..."
// and PyTorch's TCPStore "failed to connect to [H]:P". A failed connect,
// not a lost link: a rank whose neighbour never dialled it cannot tell
// whose side is unreachable, so "no link from ring peer" names no one. The
// controller blames the machine that advertised that host (issue 40).
std::string UnreachablePeer(const std::vector<std::string>& lines);

// The peer address ("host:port") a rank's last output says closed its end
// of a connection, the last one named; "" for none. It reads Gloo's
// "Connection closed by peer [H]:P" (a FIN) and "Read error [H]:P:
// Connection reset by peer" or "Write error [H]:P: Broken pipe" (an RST).
// A peer that closed or reset was reachable and its process is gone; a peer
// cut off or frozen sends nothing, and a rank waiting on it names no one.
std::string ClosedPeer(const std::vector<std::string>& lines);

}  // namespace bulwark::agent
