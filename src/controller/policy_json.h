// A policy file's mapping (policy_fields.h) read from JSON: `bulwark up
// --policy` and `bulwark sim`'s `policy:` both come through here. Header
// only, so the pure core stays free of the JSON library.
#pragma once

#include <nlohmann/json.hpp>

#include "controller/policy_fields.h"

namespace bulwark::controller {

// Sets every field of `j` (a mapping of name -> number, or true/false for
// a flag), then checks the ranges. The first bad field is the error.
inline Status ApplyPolicyJson(const nlohmann::json& j, PolicyConfig* p) {
  if (!j.is_object()) {
    return Status::InvalidArgument("policy: expected a mapping of field: value, e.g. {slow_round: 10, slow_rounds: 5}");
  }
  for (const auto& [name, v] : j.items()) {
    if (!v.is_number() && !v.is_boolean()) {
      return Status::InvalidArgument("policy: " + name + " must be a number (times in seconds), got " + v.dump());
    }
    BULWARK_RETURN_IF_ERROR(SetPolicyField(name, v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>(), p));
  }
  return p->Validate();
}

// The changed fields as a mapping, for `bulwark status --json` and records.
inline nlohmann::json PolicyJson(const std::vector<PolicyValue>& values) {
  nlohmann::json j = nlohmann::json::object();
  for (const PolicyValue& v : values) j[v.name] = v.value;
  return j;
}

}  // namespace bulwark::controller
