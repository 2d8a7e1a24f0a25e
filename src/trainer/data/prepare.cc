#include "trainer/data/prepare.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <regex>

#include "common/checksum.h"
#include "common/files.h"
#include "trainer/data/tokens.h"

namespace bulwark::trainer {
namespace {

constexpr size_t kShardTokens = 1u << 24;  // 32 MiB of uint16 per shard
constexpr int kBlockLines = 50;
constexpr int kEos = 2;  // sentencepiece's default </s> id, between lines

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(std::move(line));
    start = nl + 1;
  }
  return lines;
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + n >= s.size() + (n == 0 ? 1 : 0)) return false;
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n + 1;
  }
  return true;
}

Status SpStatus(const sentencepiece::util::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  return Status::Internal(what + ": " + s.ToString());
}

Status WriteShards(const std::string& dir, const std::string& prefix, const std::vector<uint16_t>& tokens,
                   const TokenShardMeta& meta) {
  for (size_t i = 0, n = 0; i < tokens.size(); i += kShardTokens, ++n) {
    std::vector<uint16_t> part(tokens.begin() + i, tokens.begin() + std::min(tokens.size(), i + kShardTokens));
    char name[32];
    std::snprintf(name, sizeof name, "%s-%03zu.bin", prefix.c_str(), n);
    BULWARK_RETURN_IF_ERROR(WriteTokenShard(JoinPath(dir, name), meta, part));
  }
  return Status::OK();
}

Status BuildInto(const PrepareOptions& opts, const std::string& tmp) {
  auto lines = LoadCorpus(opts.corpus);
  if (!lines.ok()) return lines.status();
  // Blocks of lines, every k-th to validation: held-out text from all over
  // the corpus, yet never a verse split from its neighbours.
  const size_t every = std::max<size_t>(2, static_cast<size_t>(1.0 / opts.val_fraction + 0.5));
  std::vector<const std::string*> train, val;
  for (size_t i = 0; i < lines->size(); ++i) {
    ((i / kBlockLines) % every == every - 1 ? val : train).push_back(&(*lines)[i]);
  }
  if (val.empty() || train.size() < 10) {
    return Status::InvalidArgument("corpus '" + opts.corpus + "' has only " + std::to_string(lines->size()) +
                                   " non-empty lines; it needs enough text for a training and a validation split");
  }

  std::string text_path = JoinPath(tmp, "tokenizer-input.txt");
  std::string text;
  for (auto* l : train) text += *l + "\n";
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(text_path, text));
  std::string args = "--input=" + text_path + " --model_prefix=" + JoinPath(tmp, "tokenizer") +
                     " --vocab_size=" + std::to_string(opts.vocab_size) +
                     " --model_type=bpe --character_coverage=1.0 --byte_fallback=true"
                     " --num_threads=" + std::to_string(opts.threads) + " --minloglevel=2";
  if (opts.quiet) {
    // sentencepiece logs to stderr whatever minloglevel says for some lines.
    std::fflush(stderr);
  }
  BULWARK_RETURN_IF_ERROR(SpStatus(sentencepiece::SentencePieceTrainer::Train(args),
                                   "training the tokenizer (try a smaller --vocab-size for a small corpus)"));
  std::remove(text_path.c_str());
  std::remove(JoinPath(tmp, "tokenizer.vocab").c_str());

  std::string model_path = JoinPath(tmp, "tokenizer.model");
  sentencepiece::SentencePieceProcessor sp;
  BULWARK_RETURN_IF_ERROR(SpStatus(sp.Load(model_path), "loading the tokenizer"));
  auto model_bytes = ReadFile(model_path);
  if (!model_bytes.ok()) return model_bytes.status();
  TokenShardMeta meta;
  meta.vocab_size = sp.GetPieceSize();
  meta.tokenizer_checksum = Hex64(Checksum64(model_bytes->data(), model_bytes->size()));
  if (meta.vocab_size > 65535) return Status::InvalidArgument("--vocab-size must stay below 65536 (uint16 tokens)");

  auto encode = [&](const std::vector<const std::string*>& src, std::vector<uint16_t>& out) -> Status {
    std::vector<int> ids;
    for (auto* l : src) {
      BULWARK_RETURN_IF_ERROR(SpStatus(sp.Encode(*l, &ids), "encoding"));
      for (int id : ids) out.push_back(static_cast<uint16_t>(id));
      out.push_back(kEos);
    }
    return Status::OK();
  };
  std::vector<uint16_t> train_tokens, val_tokens;
  BULWARK_RETURN_IF_ERROR(encode(train, train_tokens));
  BULWARK_RETURN_IF_ERROR(encode(val, val_tokens));
  BULWARK_RETURN_IF_ERROR(WriteShards(tmp, "train", train_tokens, meta));
  BULWARK_RETURN_IF_ERROR(WriteShards(tmp, "val", val_tokens, meta));
  if (!opts.quiet) {
    std::fprintf(stderr, "prepared %s: vocab %d, %zu train tokens, %zu validation tokens\n", opts.out.c_str(),
                 meta.vocab_size, train_tokens.size(), val_tokens.size());
  }
  return Status::OK();
}

}  // namespace

Result<PrepareOptions> ParsePrepareArgs(const std::vector<std::string>& args) {
  PrepareOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], v;
    bool has = false;
    if (auto eq = a.find('='); eq != std::string::npos) v = a.substr(eq + 1), a.resize(eq), has = true;
    auto value = [&]() -> Result<std::string> {
      if (has) return v;
      if (i + 1 >= args.size()) return Status::InvalidArgument("prepare: flag " + a + " needs a value");
      return args[++i];
    };
    auto number = [&](double& out) -> Status {
      auto s = value();
      if (!s.ok()) return s.status();
      char* end = nullptr;
      out = std::strtod(s->c_str(), &end);
      if (s->empty() || *end) return Status::InvalidArgument("prepare: " + a + " '" + *s + "' is not a number");
      return Status::OK();
    };
    double x = 0;
    if (a == "--corpus") {
      auto s = value(); if (!s.ok()) return s.status(); o.corpus = *s;
    } else if (a == "--out") {
      auto s = value(); if (!s.ok()) return s.status(); o.out = *s;
    } else if (a == "--vocab-size") {
      BULWARK_RETURN_IF_ERROR(number(x)); o.vocab_size = static_cast<int>(x);
    } else if (a == "--val-fraction") {
      BULWARK_RETURN_IF_ERROR(number(x)); o.val_fraction = x;
    } else if (a == "--threads") {
      BULWARK_RETURN_IF_ERROR(number(x)); o.threads = static_cast<int>(x);
    } else if (a == "--force") {
      o.force = true;
    } else if (a == "--quiet") {
      o.quiet = true;
    } else {
      return Status::InvalidArgument("prepare: unknown flag '" + a +
                                     "' (known: --corpus, --out, --vocab-size, --val-fraction, --threads, --force)");
    }
  }
  if (o.out.empty()) return Status::InvalidArgument("prepare: --out DIR is required");
  if (o.vocab_size < 300) return Status::InvalidArgument("prepare: --vocab-size must be at least 300 (256 byte pieces + text)");
  if (!(o.val_fraction > 0 && o.val_fraction < 0.5)) return Status::InvalidArgument("prepare: --val-fraction must lie in (0, 0.5)");
  if (o.threads < 1) o.threads = 1;
  return o;
}

Result<std::vector<std::string>> LoadCorpus(const std::string& corpus) {
  if (corpus == "kjv") {
    FILE* p = ::popen("bible -f 'gen1:1-rev22:21' 2>/dev/null", "r");
    std::string text;
    if (p) {
      char buf[1 << 16];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
      int rc = ::pclose(p);
      if (rc != 0) text.clear();
    }
    if (text.size() < 1000000) {
      return Status::NotFound("the KJV corpus needs Debian's bible-kjv package ('bible' printed nothing); run "
                              "scripts/install-deps.sh or apt-get install bible-kjv bible-kjv-text");
    }
    static const std::regex kRef(R"(^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ )");
    std::vector<std::string> lines = SplitLines(text);
    for (auto& l : lines) l = std::regex_replace(l, kRef, "", std::regex_constants::format_first_only);
    return lines;
  }
  auto text = ReadFile(corpus);
  if (!text.ok()) {
    return Status::NotFound("corpus '" + corpus + "' does not exist or cannot be read (" + text.status().message() +
                            "); pass --corpus kjv or the path of a UTF-8 text file");
  }
  if (!ValidUtf8(*text)) return Status::InvalidArgument("corpus '" + corpus + "' is not valid UTF-8 text");
  return SplitLines(*text);
}

Status Prepare(const PrepareOptions& opts) {
  if (PathExists(opts.out) && !opts.force) {
    return Status::FailedPrecondition(opts.out + " already exists; pass --force to replace it or choose another --out");
  }
  std::string tmp = opts.out + ".preparing." + std::to_string(::getpid());
  BULWARK_RETURN_IF_ERROR(MakeDirs(tmp));
  Status s = BuildInto(opts, tmp);
  if (s.ok() && PathExists(opts.out)) s = RemoveTree(opts.out);
  if (s.ok() && std::rename(tmp.c_str(), opts.out.c_str()) != 0) {
    s = Status::IOError("cannot rename " + tmp + " to " + opts.out);
  }
  if (!s.ok()) RemoveTree(tmp).IgnoreError();  // the build's error is the one to report; tmp is only scratch
  return s;
}

}  // namespace bulwark::trainer
