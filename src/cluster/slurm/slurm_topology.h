// Failure domains from Slurm's network topology (issue 38): the leaf switch
// each node hangs under, as topology.conf declares it and `scontrol show
// topology` prints it (the topology/tree plugin). Pure text; the tests feed
// it the Slurm documentation's topology.conf and Slurm 22.05's output.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::cluster {

// A Slurm hostlist, "tux[0-3,7],gpu[01-02],login" -> tux0 tux1 tux2 tux3
// tux7 gpu01 gpu02 login (a range keeps its zero padding). InvalidArgument
// for an unclosed bracket or a bad range.
Result<std::vector<std::string>> ExpandHostlist(const std::string& list);

// node -> its leaf switch, from topology.conf or `scontrol show topology`:
// each "SwitchName=S ... Nodes=LIST" line without "Switches=" is a leaf
// (upper levels list switches; scontrol also prints their nodes). '#'
// starts a comment. A node under two leaf switches keeps the first, as
// Slurm's own tree plugin does. Corrupt when a leaf's Nodes= does not
// expand; an empty map when the text declares no leaf (topology/flat).
Result<std::map<std::string, std::string>> LeafSwitches(const std::string& text);

}  // namespace bulwark::cluster
