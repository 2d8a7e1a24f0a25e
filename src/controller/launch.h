// JobLaunch: the policy's JobSpec plus what an agent needs to start a rank.
// The policy sees only the spec; the actuator adds the command line.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "controller/job.h"

namespace bulwark::controller {

struct JobLaunch {
  JobSpec spec;                              // spec.command is argv joined, for people
  std::vector<std::string> argv;             // what each rank runs
  std::map<std::string, std::string> env;    // added to the torchrun environment
  std::string master_addr = "127.0.0.1";
  int master_port_base = 29500;              // generation g listens on base + g % 1000; Submit randomizes it
};

}  // namespace bulwark::controller
