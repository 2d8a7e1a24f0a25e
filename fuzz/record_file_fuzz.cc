// Fuzzes the RecordFile reader (common/record_file.h), which every
// checkpoint and token shard goes through. Random bytes almost never carry
// valid checksums, so the harness seals most inputs first (writes the right
// payload and header checksums over the input's own) and the section table
// behind them gets fuzzed too; one input in four is read as it is.
#include <cstdint>
#include <cstring>
#include <string>

#include "common/checksum.h"
#include "common/record_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool seal = data[0] % 4 != 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr size_t kHeader = 48;  // record_file.h: the header layout
  if (seal && bytes.size() >= kHeader) {
    const uint64_t payload = bytes.size() - kHeader;
    std::memcpy(&bytes[16], &payload, 8);
    // The checksum the claimed version uses: 1 Checksum64, 2 XXH3.
    uint32_t version;
    std::memcpy(&version, &bytes[8], 4);
    const uint64_t sum = version == 1 ? bulwark::Checksum64(bytes.data() + kHeader, payload)
                                      : bulwark::Xxh3Checksum64(bytes.data() + kHeader, payload);
    std::memcpy(&bytes[24], &sum, 8);
    const uint64_t hsum = bulwark::Checksum64(bytes.data(), 40);
    std::memcpy(&bytes[40], &hsum, 8);
  }
  // The kind the record claims, so sealed inputs get past the kind check.
  std::string kind = bytes.size() >= kHeader ? std::string(bytes.data() + 32, strnlen(bytes.data() + 32, 8)) : "ckpt";
  auto r = bulwark::RecordReader::Parse(std::move(bytes), kind, "fuzz.rec");
  if (!r.ok()) return 0;
  // Every section a reader lists must lie inside its bytes.
  for (const char* name : {"", "params", "meta", "tokens"}) {
    if (!r->Has(name)) continue;
    auto v = r->Get(name);
    if (!v.ok()) __builtin_trap();
    volatile char sink = v->empty() ? 0 : (*v)[v->size() - 1];
    (void)sink;
  }
  return 0;
}
