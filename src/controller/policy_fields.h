// The policy's thresholds by name: what a policy file sets (`bulwark up
// --policy FILE`) and what `bulwark sim`'s `policy:` mapping sets, one table
// for both, so the policy a fleet was simulated with is the one it runs.
// Times are in seconds, counts whole, flags 0 or 1.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/policy_config.h"

namespace bulwark::controller {

struct PolicyValue {
  std::string name;
  double value = 0;
  const char* unit = "";  // "s" for a time, "" otherwise
};

// Sets one field. An unknown name, a count that is not whole or a flag
// that is not 0 or 1 is InvalidArgument naming the field (and, for a
// misspelt name, the one meant). Ranges are PolicyConfig::Validate's.
Status SetPolicyField(const std::string& name, double value, PolicyConfig* p);

// A job's own fields (a job file's `policy:`) laid over `p`, the cluster's,
// then the whole checked by PolicyConfig::Validate. The first bad field is
// the error, and `p` is then partly set: apply to a copy.
Status ApplyPolicyValues(const std::map<std::string, double>& values, PolicyConfig* p);

// Every settable field of `p`, in the table's order.
std::vector<PolicyValue> PolicyValues(const PolicyConfig& p);

// The fields where `p` differs from the shipped defaults: what a
// controller says it runs with.
std::vector<PolicyValue> ChangedPolicy(const PolicyConfig& p);

// "slow_round 4 s, slow_rounds 3", or "defaults".
std::string DescribePolicy(const std::vector<PolicyValue>& changed);

}  // namespace bulwark::controller
