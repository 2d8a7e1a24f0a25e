// JobJournals: where a fleet keeps its named jobs' journals (fleet.h), one
// JournalStore per job. Two places, as for the main journal:
//
//   SQLite  DIR/jobs/NAME.db, on the controller's disk (`bulwark up`).
//   etcd    PREFIX/jobs/NAME/, beside the main journal's keys and fenced by
//           the same leader's term (`bulwark up --ha`), so that a controller
//           taking over on another machine replays every job, not only the
//           main plane.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "plane/journal_store.h"

namespace bulwark::plane {

class EtcdClient;
class UnsettledWrites;
struct Term;

class JobJournals {
 public:
  virtual ~JobJournals() = default;
  // Every job with a journal here, in name order.
  virtual Result<std::vector<std::string>> Names() const = 0;
  // Job `name`'s journal; `create` makes it when absent (NotFound without).
  virtual Result<std::unique_ptr<JournalStore>> Open(const std::string& name, bool create) const = 0;
  // Removes job `name`'s journal (a submit its plane refused). Best effort:
  // what cannot be removed is said in the returned status.
  virtual Status Remove(const std::string& name) const = 0;
};

std::shared_ptr<const JobJournals> SqliteJobJournals(std::string dir);
std::shared_ptr<const JobJournals> EtcdJobJournals(std::shared_ptr<const EtcdClient> etcd, std::string prefix,
                                                   Term term, std::shared_ptr<UnsettledWrites> unsettled);

}  // namespace bulwark::plane
