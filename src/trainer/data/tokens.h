// Token shards and the data set a trainer reads.
//
// `bulwark-train prepare` writes a data directory:
//   tokenizer.model          sentencepiece BPE model
//   train-NNN.bin, val-NNN.bin   RecordFile kind "tokens": section "meta"
//                            (JSON: vocab_size, tokenizer_checksum, count)
//                            and section "tokens" (uint16 little-endian)
// Every shard names the tokenizer that produced it by checksum, so a shard
// copied in from another data set is refused instead of training on garbage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::trainer {

struct TokenShardMeta {
  int vocab_size = 0;
  std::string tokenizer_checksum;  // Hex64 of tokenizer.model's bytes
  uint64_t count = 0;
};

Status WriteTokenShard(const std::string& path, const TokenShardMeta& meta, const std::vector<uint16_t>& tokens);
// Reads and verifies one shard; appends its tokens to `out`.
Result<TokenShardMeta> ReadTokenShard(const std::string& path, std::vector<uint16_t>* out);

struct DataSet {
  std::string dir;
  int vocab_size = 0;
  std::string tokenizer_checksum;
  std::vector<uint16_t> train;
  std::vector<uint16_t> val;
};

// Loads every train-*.bin and val-*.bin in `dir`, checking that each was
// made by `dir`/tokenizer.model and fits its vocabulary.
Result<DataSet> LoadDataSet(const std::string& dir);

}  // namespace bulwark::trainer
