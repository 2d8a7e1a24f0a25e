// "Did you mean ...?": the nearest of a set of known names to a mistyped one,
// shared by bulwark's and bulwark-train's command lines and config files.
#pragma once

#include <string>
#include <vector>

namespace bulwark {

// Levenshtein distance: insertions, deletions and substitutions.
size_t EditDistance(const std::string& a, const std::string& b);
// The candidate nearest to `word`, or "" when none is within `max_distance`
// edits (a guess further off than that misleads more than it helps).
std::string Nearest(const std::string& word, const std::vector<std::string>& candidates, size_t max_distance = 3);

}  // namespace bulwark
