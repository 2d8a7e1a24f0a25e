// Small, checked file-system helpers. Every failure names the path and the
// OS's reason; nothing here throws or exits.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark {

Result<std::string> ReadFile(const std::string& path);
// The first line without its line end and trailing blanks; "" when the file
// is missing or unreadable (one-value files: sysfs, emulated health).
std::string ReadFirstLine(const std::string& path);

// Writes `data` so that `path` holds either its old content or all of the new:
// a temporary file in the same directory, fsync, rename over `path`, fsync of
// the directory. A crash at any point leaves at most a stray "*.tmp.*" file.
Status WriteFileAtomic(const std::string& path, const std::string& data);
Status WriteFileAtomic(const std::string& path, const void* data, size_t n);

Status MakeDirs(const std::string& path);
Status RemoveTree(const std::string& path);
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
// Names (not paths) of the entries of `dir`, sorted; empty if it does not exist.
std::vector<std::string> ListDir(const std::string& dir);
std::string JoinPath(const std::string& a, const std::string& b);

// The state letter of /proc/PID/stat ('R', 'S', 'D', 'T', 'Z', ...), or 0
// when it cannot be read. A thread's id reads its own state.
char ProcessState(pid_t pid);

}  // namespace bulwark
