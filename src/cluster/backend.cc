#include "cluster/backend.h"

#include "cluster/slurm/slurm_backend.h"
#include "common/files.h"

namespace bulwark::cluster {

Result<std::unique_ptr<Backend>> OpenBackend(const Layout& layout, LogFn log) {
  if (!PathExists(layout.backend())) return std::unique_ptr<Backend>();
  Result<std::string> text = ReadFile(layout.backend());
  if (!text.ok()) return text.status();
  Result<SlurmRecord> record = DecodeSlurmRecord(*text);
  if (!record.ok()) return record.status().Annotate(layout.backend());
  return std::unique_ptr<Backend>(
      new SlurmBackend(layout, std::move(*record), std::make_unique<SystemRunner>(), nullptr, std::move(log)));
}

}  // namespace bulwark::cluster
