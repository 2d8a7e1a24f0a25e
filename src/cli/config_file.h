// A YAML or JSON file read into JSON: `bulwark sim --config` and `bulwark up
// --policy` take either, and a file and its JSON twin give the same value.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace YAML {
class Node;
}  // namespace YAML

namespace bulwark::cli {

// A YAML node as JSON: scalars become numbers or booleans where they read
// as one, so a YAML file and its JSON twin give the same value.
nlohmann::json FromYaml(const YAML::Node& n);

// `path` ending in .json is JSON, anything else YAML. `flag` names the
// option in the error ("--config sim.yaml: ...").
Result<nlohmann::json> ReadConfigFile(const std::string& path, const std::string& flag);

// `bulwark up --policy FILE`: the file's mapping of policy fields
// (controller/policy_fields.h), checked as the controller will apply it,
// so a bad file fails `up` before anything starts.
Result<nlohmann::json> ReadPolicyFile(const std::string& path);

}  // namespace bulwark::cli
