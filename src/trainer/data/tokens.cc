#include "trainer/data/tokens.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/checksum.h"
#include "common/files.h"
#include "common/record_file.h"

namespace bulwark::trainer {

Status WriteTokenShard(const std::string& path, const TokenShardMeta& meta, const std::vector<uint16_t>& tokens) {
  nlohmann::json j = {{"vocab_size", meta.vocab_size},
                      {"tokenizer_checksum", meta.tokenizer_checksum},
                      {"count", tokens.size()}};
  RecordWriter w("tokens");
  w.Add("meta", j.dump());
  w.Add("tokens", tokens.data(), tokens.size() * sizeof(uint16_t));
  return w.WriteAtomic(path);
}

Result<TokenShardMeta> ReadTokenShard(const std::string& path, std::vector<uint16_t>* out) {
  auto rec = RecordReader::Open(path, "tokens");
  if (!rec.ok()) return rec.status();
  auto meta_text = rec->Get("meta");
  auto data = rec->Get("tokens");
  if (!meta_text.ok()) return meta_text.status();
  if (!data.ok()) return data.status();
  TokenShardMeta meta;
  try {
    auto j = nlohmann::json::parse(*meta_text);
    meta.vocab_size = j.at("vocab_size").get<int>();
    meta.tokenizer_checksum = j.at("tokenizer_checksum").get<std::string>();
    meta.count = j.at("count").get<uint64_t>();
  } catch (const std::exception& e) {
    return Status::Corrupt(path + ": bad shard metadata: " + e.what());
  }
  if (data->size() != meta.count * sizeof(uint16_t)) {
    return Status::Corrupt(path + ": token count does not match its metadata");
  }
  size_t old = out->size();
  out->resize(old + meta.count);
  std::memcpy(out->data() + old, data->data(), data->size());
  for (size_t i = old; i < out->size(); ++i) {
    if ((*out)[i] >= meta.vocab_size) {
      return Status::Corrupt(path + ": token " + std::to_string((*out)[i]) + " is outside the vocabulary of " +
                             std::to_string(meta.vocab_size));
    }
  }
  return meta;
}

Result<DataSet> LoadDataSet(const std::string& dir) {
  std::string model_path = JoinPath(dir, "tokenizer.model");
  auto model = ReadFile(model_path);
  if (!model.ok()) {
    return Status::NotFound("no data set in " + dir + " (" + model_path +
                            " is missing); create it with: bulwark-train prepare --corpus kjv --out " + dir);
  }
  DataSet ds;
  ds.dir = dir;
  ds.tokenizer_checksum = Hex64(Checksum64(model->data(), model->size()));
  int shards = 0;
  for (const std::string& name : ListDir(dir)) {
    bool train = name.rfind("train-", 0) == 0, val = name.rfind("val-", 0) == 0;
    if ((!train && !val) || name.size() < 4 || name.substr(name.size() - 4) != ".bin") continue;
    std::string path = JoinPath(dir, name);
    auto meta = ReadTokenShard(path, train ? &ds.train : &ds.val);
    if (!meta.ok()) return meta.status();
    if (meta->tokenizer_checksum != ds.tokenizer_checksum) {
      return Status::InvalidArgument(path + " was made by another tokenizer than " + model_path +
                                     "; re-run 'bulwark-train prepare' for this directory or move the shard out");
    }
    if (ds.vocab_size != 0 && meta->vocab_size != ds.vocab_size) {
      return Status::InvalidArgument(path + ": vocabulary size differs from the other shards");
    }
    ds.vocab_size = meta->vocab_size;
    ++shards;
  }
  if (ds.train.empty()) return Status::NotFound("no train-*.bin shards in " + dir + "; re-run 'bulwark-train prepare'");
  if (ds.val.empty()) return Status::NotFound("no val-*.bin shards in " + dir + "; re-run 'bulwark-train prepare'");
  return ds;
}

}  // namespace bulwark::trainer
