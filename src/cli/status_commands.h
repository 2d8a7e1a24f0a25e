// `bulwark status`, `incidents` and `ledger`: the controller's read-only
// views, printed for a person or, with --json, as the controller's JSON.
#pragma once

#include "cli/args.h"
#include "common/status.h"

namespace bulwark::cli {

Status StatusCmd(const Args& a);
Status IncidentsCmd(const Args& a);
Status LedgerCmd(const Args& a);

}  // namespace bulwark::cli
