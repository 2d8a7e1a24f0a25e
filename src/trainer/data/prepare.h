// `bulwark-train prepare`: turns a text corpus into a data directory
// (tokenizer.model plus token shards, see tokens.h).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::trainer {

struct PrepareOptions {
  std::string corpus = "kjv";   // "kjv" or the path of a UTF-8 text file
  std::string out;
  int vocab_size = 2048;
  double val_fraction = 0.05;   // share of 50-line blocks held out for validation
  int threads = 2;
  bool force = false;           // replace an existing `out`
  bool quiet = false;
};

Result<PrepareOptions> ParsePrepareArgs(const std::vector<std::string>& args);

// The corpus as lines; for "kjv", the King James Bible from Debian's
// bible-kjv package with verse references ("Ge1:1 ") stripped.
Result<std::vector<std::string>> LoadCorpus(const std::string& corpus);

// Builds the directory in a sibling temporary directory and renames it into
// place at the end, so a failure leaves nothing at `out`.
Status Prepare(const PrepareOptions& opts);

}  // namespace bulwark::trainer
