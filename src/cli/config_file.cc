#include "cli/config_file.h"

#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "controller/policy_json.h"

namespace bulwark::cli {
namespace {

using nlohmann::json;

}  // namespace

json FromYaml(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json j = json::object();
      for (const auto& kv : n) j[kv.first.as<std::string>()] = FromYaml(kv.second);
      return j;
    }
    case YAML::NodeType::Sequence: {
      json j = json::array();
      for (const auto& x : n) j.push_back(FromYaml(x));
      return j;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = n.Scalar();
      if (s == "true" || s == "false") return s == "true";
      try {
        size_t used = 0;
        double v = std::stod(s, &used);
        if (used == s.size()) return v;
      } catch (const std::exception&) {
      }
      return s;
    }
    default:
      return nullptr;
  }
}

Result<json> ReadConfigFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(flag + " " + path + ": cannot read it; give a YAML or JSON file");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    if (path.size() > 5 && path.substr(path.size() - 5) == ".json") return json::parse(ss.str());
    return FromYaml(YAML::Load(ss.str()));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(flag + " " + path + ": " + e.what());
  }
}

Result<json> ReadPolicyFile(const std::string& path) {
  Result<json> j = ReadConfigFile(path, "--policy");
  if (!j.ok()) return j.status();
  controller::PolicyConfig p;
  if (Status s = controller::ApplyPolicyJson(*j, &p); !s.ok()) {
    std::string why = s.message();
    if (why.rfind("policy: ", 0) == 0) why.erase(0, 8);  // the flag says it already
    return Status::InvalidArgument("--policy " + path + ": " + why);
  }
  return j;
}

}  // namespace bulwark::cli
