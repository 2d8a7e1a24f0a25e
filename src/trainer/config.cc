#include "trainer/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "common/files.h"

namespace bulwark::trainer {
namespace {

struct Key {
  const char* name;
  const char* help;
  bool is_bool;
  std::function<Status(TrainConfig&, const std::string&)> set;
  std::function<std::string(const TrainConfig&)> get;
};

Status BadValue(const std::string& key, const std::string& value, const std::string& want) {
  return Status::InvalidArgument("--" + key + " '" + value + "' is not " + want);
}

template <typename T>
Status ParseInt(const std::string& key, const std::string& v, T& out) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0) return BadValue(key, v, "an integer");
  out = static_cast<T>(x);
  return Status::OK();
}
Status ParseDouble(const std::string& key, const std::string& v, double& out) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0) return BadValue(key, v, "a number");
  out = x;
  return Status::OK();
}
Status ParseBool(const std::string& key, const std::string& v, bool& out) {
  if (v == "true" || v == "1" || v == "yes" || v.empty()) out = true;
  else if (v == "false" || v == "0" || v == "no") out = false;
  else return BadValue(key, v, "true or false");
  return Status::OK();
}
std::string Num(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

#define INT_KEY(NAME, FIELD, HELP)                                                           \
  Key{NAME, HELP, false, [](TrainConfig& c, const std::string& v) { return ParseInt(NAME, v, c.FIELD); }, \
      [](const TrainConfig& c) { return std::to_string(c.FIELD); }}
#define DBL_KEY(NAME, FIELD, HELP)                                                              \
  Key{NAME, HELP, false, [](TrainConfig& c, const std::string& v) { return ParseDouble(NAME, v, c.FIELD); }, \
      [](const TrainConfig& c) { return Num(c.FIELD); }}
#define STR_KEY(NAME, FIELD, HELP)                                                          \
  Key{NAME, HELP, false, [](TrainConfig& c, const std::string& v) { c.FIELD = v; return Status::OK(); }, \
      [](const TrainConfig& c) { return c.FIELD; }}
#define BOOL_KEY(NAME, FIELD, HELP)                                                           \
  Key{NAME, HELP, true, [](TrainConfig& c, const std::string& v) { return ParseBool(NAME, v, c.FIELD); }, \
      [](const TrainConfig& c) { return std::string(c.FIELD ? "true" : "false"); }}

const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = {
      STR_KEY("data", data_dir, "directory written by 'bulwark-train prepare'"),
      INT_KEY("steps", steps, "optimizer steps to train in total"),
      INT_KEY("batch-size", batch_size, "sequences per rank per step"),
      DBL_KEY("lr", lr, "peak learning rate"),
      DBL_KEY("min-lr-ratio", min_lr_ratio, "cosine decay floor as a fraction of lr"),
      INT_KEY("warmup-steps", warmup_steps, "linear warmup steps"),
      DBL_KEY("weight-decay", weight_decay, "AdamW decoupled weight decay (matrices only)"),
      DBL_KEY("beta1", beta1, "Adam beta1"),
      DBL_KEY("beta2", beta2, "Adam beta2"),
      DBL_KEY("eps", eps, "Adam epsilon"),
      DBL_KEY("grad-clip", grad_clip, "global gradient-norm clip, 0 disables"),
      INT_KEY("eval-every", eval_every, "validation every N steps, 0 disables"),
      INT_KEY("eval-batches", eval_batches, "validation batches per rank"),
      INT_KEY("seed", seed, "seed for initialization and data order"),
      INT_KEY("threads", threads, "intra-op threads, 0 for all cores"),
      STR_KEY("ckpt-dir", ckpt_dir, "directory for checkpoints"),
      INT_KEY("ckpt-every", ckpt_every, "checkpoint every N steps, 0 disables"),
      INT_KEY("ckpt-keep", ckpt_keep, "complete checkpoints to keep"),
      BOOL_KEY("resume", resume, "continue from the newest valid checkpoint in --ckpt-dir"),
      BOOL_KEY("allow-fresh-start", allow_fresh_start,
               "with --resume: start from step 0 when every completed checkpoint is rejected (else an error)"),
      STR_KEY("log-format", log_format, "human (live progress line) or json (one object per line)"),
      INT_KEY("log-every", log_every, "json: a step line every N steps"),
      BOOL_KEY("shard-optimizer", shard_optimizer, "ZeRO-1: each data-parallel rank keeps its own slice of the optimizer state"),
      DBL_KEY("dist-timeout", dist_timeout_s, "seconds a collective may wait for a peer"),
      DBL_KEY("bucket-mb", bucket_mb, "gradient all-reduce bucket size in MiB"),
      STR_KEY("optimizer", optimizer, "adamw, or poet (block linears become R W0 P; the rest stays AdamW)"),
      INT_KEY("stop-at", stop_at, "stop after this step as if preempted (drills, tests); 0: never"),
      STR_KEY("memory-ckpt", memory_ckpt, "every-step in-memory checkpoints via the agent: auto, on or off"),
      BOOL_KEY("step-checksum", step_checksum, "print a parameter checksum with every step (tests)"),
      STR_KEY("device", device, "auto (CUDA when this build has it and a GPU is visible), cpu or cuda"),
      STR_KEY("precision", precision, "auto (bf16 where the CPU has AVX-512 BF16 or AMX), bf16 or fp32"),
      INT_KEY("pp", pp, "pipeline stages; WORLD_SIZE = data-parallel ranks x pp"),
      INT_KEY("micro-batches", micro_batches, "micro-batches per step (must divide --batch-size)"),
      INT_KEY("vocab-size", model.vocab_size, "0 takes the tokenizer's vocabulary size"),
      INT_KEY("d-model", model.d_model, "model width"),
      INT_KEY("n-layers", model.n_layers, "transformer blocks"),
      INT_KEY("n-heads", model.n_heads, "attention heads"),
      INT_KEY("ffn", model.ffn, "SwiGLU hidden width"),
      INT_KEY("context", model.context, "sequence length"),
      STR_KEY("init", model.init, "weight init: standard or normalized"),
      STR_KEY("poet-variant", model.poet.variant, "POET: bs (block-stochastic) or fs (fully stochastic)"),
      INT_KEY("poet-block-size", model.poet.block_size, "POET-BS block size b"),
      DBL_KEY("poet-fs-fraction", model.poet.fs_fraction, "POET-FS: rotated share of each side, in (0, 1]"),
      INT_KEY("poet-neumann-terms", model.poet.neumann_terms, "Cayley-Neumann terms k (>= 1)"),
      INT_KEY("poet-merge-every", model.poet.merge_every, "merge-then-reinitialize every N steps"),
      STR_KEY("poet-init", model.poet.init, "W0 init: normalized, standard or uniform-spectrum"),
      DBL_KEY("poet-lr", model.poet.lr, "POET learning rate, 0: from the block size"),
      STR_KEY("poet-apply", model.poet.apply, "weight (form R W0 P) or activations (rotate x and y)"),
      INT_KEY("poet-diag-every", model.poet.diag_every, "POET diagnostics every N steps, 0: off"),
  };
  return keys;
}

std::string Canonical(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

const Key* FindKey(const std::string& key) {
  for (const Key& k : Keys())
    if (key == k.name) return &k;
  return nullptr;
}

Status UnknownKey(const std::string& key, const std::string& where) {
  std::string best;
  size_t best_d = 1000;
  for (const Key& k : Keys()) {
    size_t d = EditDistance(key, k.name);
    if (d < best_d) best_d = d, best = k.name;
  }
  std::string dashes = where == "flag" ? "--" : "";
  std::string msg = "unknown " + where + " '" + dashes + key + "'";
  if (best_d <= 3) msg += "; did you mean '" + dashes + best + "'?";
  msg += " (bulwark-train --help lists every key)";
  return Status::InvalidArgument(msg);
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

Status ApplyConfigFile(TrainConfig& cfg, const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status().Annotate("config file");
  return ApplyConfigText(cfg, *text, path);
}

}  // namespace

Status ApplyConfigText(TrainConfig& cfg, const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = Trim(line);
    if (line.empty()) continue;
    std::string where = source + ":" + std::to_string(lineno);
    auto eq = line.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(where + ": expected 'key = value', got '" + line + "'");
    }
    std::string key = Canonical(Trim(line.substr(0, eq)));
    std::string value = Trim(line.substr(eq + 1));
    if (key == "config") return Status::InvalidArgument(where + ": a config file cannot name another config");
    if (!FindKey(key)) return UnknownKey(key, "config key").Annotate(where);
    BULWARK_RETURN_IF_ERROR(SetKey(cfg, key, value).Annotate(where));
  }
  return Status::OK();
}

std::string ModelConfig::ShapeString() const {
  return "vocab=" + std::to_string(vocab_size) + " d_model=" + std::to_string(d_model) +
         " n_layers=" + std::to_string(n_layers) + " n_heads=" + std::to_string(n_heads) +
         " ffn=" + std::to_string(ffn) + " context=" + std::to_string(context) +
         (poet.enabled ? " " + poet.ShapeString() : "");
}

Status ModelConfig::Validate() const {
  if (d_model <= 0 || n_layers <= 0 || n_heads <= 0 || ffn <= 0 || context <= 0 || vocab_size < 0) {
    return Status::InvalidArgument("model sizes must be positive: " + ShapeString());
  }
  if (d_model % n_heads != 0) {
    return Status::InvalidArgument("--d-model " + std::to_string(d_model) + " is not divisible by --n-heads " +
                                   std::to_string(n_heads));
  }
  if (head_dim() % 2 != 0) {
    return Status::InvalidArgument("head dimension " + std::to_string(head_dim()) +
                                   " must be even for rotary embeddings; change --d-model or --n-heads");
  }
  if (init != "standard" && init != "normalized") {
    return Status::InvalidArgument("--init '" + init + "' is not one of: standard, normalized");
  }
  if (!poet.enabled) return Status::OK();
  BULWARK_RETURN_IF_ERROR(poet.Validate());
  if (poet.variant == "bs") {
    // Every block linear's both sides must split into whole blocks; name the
    // first layer that does not, so the user knows which width to change.
    const std::pair<const char*, int> sides[] = {{"blocks.*.attn.wq input", d_model},
                                                 {"blocks.*.mlp.gate output", ffn}};
    for (auto& [layer, width] : sides) {
      if (width % poet.block_size != 0) {
        return Status::InvalidArgument("--poet-block-size " + std::to_string(poet.block_size) +
                                       " does not divide the width " + std::to_string(width) + " of layer " + layer +
                                       "; choose a block size that divides both --d-model " +
                                       std::to_string(d_model) + " and --ffn " + std::to_string(ffn));
      }
    }
  }
  return Status::OK();
}

Status TrainConfig::Validate() const {
  BULWARK_RETURN_IF_ERROR(model.Validate());
  auto positive = [](const char* name, double v) {
    return v > 0 ? Status::OK() : Status::InvalidArgument(std::string("--") + name + " must be positive");
  };
  BULWARK_RETURN_IF_ERROR(positive("batch-size", batch_size));
  BULWARK_RETURN_IF_ERROR(positive("steps", static_cast<double>(steps)));
  BULWARK_RETURN_IF_ERROR(positive("lr", lr));
  BULWARK_RETURN_IF_ERROR(positive("dist-timeout", dist_timeout_s));
  BULWARK_RETURN_IF_ERROR(positive("bucket-mb", bucket_mb));
  BULWARK_RETURN_IF_ERROR(positive("log-every", static_cast<double>(log_every)));
  if (warmup_steps < 0 || eval_every < 0 || ckpt_every < 0 || threads < 0 || grad_clip < 0 || weight_decay < 0) {
    return Status::InvalidArgument("--warmup-steps, --eval-every, --ckpt-every, --threads, --grad-clip and "
                                   "--weight-decay must not be negative");
  }
  if (min_lr_ratio < 0 || min_lr_ratio > 1) return Status::InvalidArgument("--min-lr-ratio must lie in [0, 1]");
  if (memory_ckpt != "auto" && memory_ckpt != "on" && memory_ckpt != "off") {
    return Status::InvalidArgument("--memory-ckpt '" + memory_ckpt + "' is not one of: auto, on, off");
  }
  if (log_format != "human" && log_format != "json") {
    return Status::InvalidArgument("--log-format '" + log_format + "' is not one of: human, json");
  }
  if (optimizer != "adamw" && optimizer != "poet") {
    return Status::InvalidArgument("--optimizer '" + optimizer + "' is not one of: adamw, poet");
  }
  if (model.poet.enabled != (optimizer == "poet")) {
    return Status::Internal("model.poet.enabled must follow --optimizer");
  }
  if ((ckpt_every > 0 || resume) && ckpt_dir.empty()) {
    return Status::InvalidArgument("--ckpt-every and --resume need --ckpt-dir DIR");
  }
  if (precision != "auto" && precision != "bf16" && precision != "fp32") {
    return Status::InvalidArgument("--precision '" + precision + "' is not one of: auto, bf16, fp32");
  }
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return Status::InvalidArgument("--device '" + device + "' is not one of: auto, cpu, cuda");
  }
  if (pp < 1) return Status::InvalidArgument("--pp must be at least 1");
  if (pp > model.n_layers) {
    return Status::InvalidArgument("--pp " + std::to_string(pp) + " exceeds the " + std::to_string(model.n_layers) +
                                   " layers (--n-layers); use at most one stage per layer");
  }
  if (micro_batches < 1 || batch_size % micro_batches != 0) {
    return Status::InvalidArgument("--micro-batches " + std::to_string(micro_batches) +
                                   " does not divide --batch-size " + std::to_string(batch_size) +
                                   "; choose a divisor of the batch size");
  }
  if (ckpt_keep < 1) return Status::InvalidArgument("--ckpt-keep must be at least 1");
  if (eval_every > 0 && eval_batches < 1) return Status::InvalidArgument("--eval-batches must be at least 1");
  return Status::OK();
}

Result<TrainConfig> Preset(const std::string& name) {
  TrainConfig c;
  c.preset = name;
  if (name == "small") return c;  // the struct's defaults are the small preset
  if (name == "tiny") {
    c.model.d_model = 64;
    c.model.n_layers = 2;
    c.model.n_heads = 4;
    c.model.ffn = 192;
    c.model.context = 32;
    c.batch_size = 8;
    c.steps = 200;
    c.lr = 5e-3;
    c.warmup_steps = 10;
    c.eval_every = 50;
    c.eval_batches = 4;
    return c;
  }
  return Status::InvalidArgument("unknown preset '" + name + "': use tiny, small or the path of a config file");
}

Status SetKey(TrainConfig& cfg, const std::string& raw_key, const std::string& value) {
  std::string key = Canonical(raw_key);
  const Key* k = FindKey(key);
  if (!k) return UnknownKey(key, "key");
  return k->set(cfg, value);
}

Result<TrainConfig> ParseTrainArgs(const std::vector<std::string>& args) {
  // First pass: find --config so that flags apply on top of it wherever
  // they stand on the command line.
  std::string config = "small";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) config = args[i + 1];
    else if (args[i].rfind("--config=", 0) == 0) config = args[i].substr(9);
  }
  TrainConfig cfg;
  if (config == "tiny" || config == "small") {
    auto p = Preset(config);
    if (!p.ok()) return p.status();
    cfg = *p;
  } else if (PathExists(config)) {
    cfg.preset = config;
    BULWARK_RETURN_IF_ERROR(ApplyConfigFile(cfg, config));
  } else {
    return Status::InvalidArgument("--config '" + config + "' is neither a preset (tiny, small) nor an existing file");
  }

  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      return Status::InvalidArgument("unexpected argument '" + a + "'; flags look like --key value");
    }
    std::string key = a.substr(2), value;
    bool has_value = false;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key.resize(eq);
      has_value = true;
    }
    key = Canonical(key);
    if (key == "config") {
      if (!has_value) ++i;
      continue;
    }
    const Key* k = FindKey(key);
    if (!k) return UnknownKey(key, "flag");
    if (!has_value && !k->is_bool) {
      if (i + 1 >= args.size()) return Status::InvalidArgument("flag --" + key + " needs a value");
      value = args[++i];
    }
    BULWARK_RETURN_IF_ERROR(k->set(cfg, value));
  }
  cfg.model.poet.enabled = cfg.optimizer == "poet";
  return cfg;
}

std::string UsageText(const TrainConfig& cfg) {
  std::ostringstream o;
  o << "usage: bulwark-train [--config tiny|small|FILE] [--key value ...]\n"
    << "       bulwark-train prepare --corpus kjv|PATH --out DIR [--vocab-size N] [--val-fraction F]\n\n"
    << "Keys (also valid as 'key = value' lines in a config file):\n";
  for (const Key& k : Keys()) {
    std::string name = std::string("  --") + k.name;
    name.resize(22, ' ');
    o << name << k.help << " [" << k.get(cfg) << "]\n";
  }
  return o.str();
}

}  // namespace bulwark::trainer
