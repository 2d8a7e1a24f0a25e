#include "common/record_file.h"

#include <cstring>

#include "common/checksum.h"
#include "common/files.h"

namespace bulwark {
namespace {

constexpr char kMagic[8] = {'B', 'L', 'W', 'K', 'R', 'E', 'C', '\0'};
// Version 2 checksums the payload with XXH3; version 1 (Checksum64) is still
// read, so checkpoints and token shards written before the switch load. The
// header's own checksum is Checksum64 in both: it covers the version field.
constexpr uint32_t kVersion = 2;
constexpr uint32_t kVersionChecksum64 = 1;

uint64_t PayloadChecksum(uint32_t version, const char* p, size_t n) {
  return version == kVersionChecksum64 ? Checksum64(p, n) : Xxh3Checksum64(p, n);
}
constexpr size_t kHeaderSize = 48;

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T Take(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

RecordWriter::RecordWriter(std::string kind) : kind_(std::move(kind)) { kind_.resize(8, '\0'); }

void RecordWriter::Add(const std::string& name, const void* data, size_t n) {
  Put<uint32_t>(payload_, static_cast<uint32_t>(name.size()));
  payload_ += name;
  Put<uint64_t>(payload_, n);
  payload_.append(static_cast<const char*>(data), n);
  ++sections_;
}

std::string RecordWriter::Serialize() const {
  std::string out;
  out.reserve(kHeaderSize + payload_.size());
  out.append(kMagic, 8);
  Put<uint32_t>(out, kVersion);
  Put<uint32_t>(out, sections_);
  Put<uint64_t>(out, payload_.size());
  Put<uint64_t>(out, PayloadChecksum(kVersion, payload_.data(), payload_.size()));
  out += kind_;
  Put<uint64_t>(out, Checksum64(out.data(), out.size()));
  out += payload_;
  return out;
}

Status RecordWriter::WriteAtomic(const std::string& path) const {
  return WriteFileAtomic(path, Serialize());
}

Result<RecordReader> RecordReader::Parse(std::string bytes, const std::string& kind, const std::string& where) {
  auto corrupt = [&](const std::string& why) { return Status::Corrupt(where + ": " + why); };
  if (bytes.size() < kHeaderSize) return corrupt("truncated header (" + std::to_string(bytes.size()) + " bytes)");
  const char* h = bytes.data();
  if (std::memcmp(h, kMagic, 8) != 0) return corrupt("not a bulwark record (bad magic)");
  if (Take<uint64_t>(h + 40) != Checksum64(h, 40)) return corrupt("header checksum mismatch");
  uint32_t version = Take<uint32_t>(h + 8);
  if (version != kVersion && version != kVersionChecksum64) {
    return corrupt("record version " + std::to_string(version) + " is not supported (this build reads " +
                   std::to_string(kVersionChecksum64) + " and " + std::to_string(kVersion) + ")");
  }
  std::string want_kind = kind;
  want_kind.resize(8, '\0');
  if (std::memcmp(h + 32, want_kind.data(), 8) != 0) {
    return corrupt("holds '" + std::string(h + 32, strnlen(h + 32, 8)) + "', expected '" + kind + "'");
  }
  uint32_t count = Take<uint32_t>(h + 12);
  uint64_t len = Take<uint64_t>(h + 16);
  if (bytes.size() - kHeaderSize != len) {
    return corrupt("payload is " + std::to_string(bytes.size() - kHeaderSize) + " bytes, header says " +
                   std::to_string(len) + " (torn write?)");
  }
  if (PayloadChecksum(version, h + kHeaderSize, len) != Take<uint64_t>(h + 24)) {
    return corrupt("payload checksum mismatch");
  }

  RecordReader r;
  r.bytes_ = std::move(bytes);
  r.where_ = where;
  const char* p = r.bytes_.data() + kHeaderSize;
  const char* end = p + len;
  for (uint32_t i = 0; i < count; ++i) {
    if (end - p < 4) return corrupt("section table truncated");
    uint32_t nlen = Take<uint32_t>(p);
    p += 4;
    if (static_cast<uint64_t>(end - p) < nlen + 8ull) return corrupt("section name truncated");
    std::string name(p, nlen);
    p += nlen;
    uint64_t dlen = Take<uint64_t>(p);
    p += 8;
    if (static_cast<uint64_t>(end - p) < dlen) return corrupt("section '" + name + "' truncated");
    r.sections_[name] = {static_cast<size_t>(p - r.bytes_.data()), dlen};
    p += dlen;
  }
  if (p != end) return corrupt("trailing bytes after the last section");
  return r;
}

Result<RecordReader> RecordReader::Open(const std::string& path, const std::string& kind) {
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return Parse(std::move(*bytes), kind, path);
}

Result<std::string_view> RecordReader::Get(const std::string& name) const {
  auto it = sections_.find(name);
  if (it == sections_.end()) return Status::Corrupt(where_ + ": missing section '" + name + "'");
  return std::string_view(bytes_.data() + it->second.first, it->second.second);
}

}  // namespace bulwark
