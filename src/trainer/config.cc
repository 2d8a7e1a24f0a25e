#include "trainer/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <sstream>

#include <CLI/CLI.hpp>

#include "common/files.h"
#include "common/suggest.h"

namespace bulwark::trainer {
namespace {

// One setting: its name in flags and files, its help, the label of its value
// in --help ("" for a boolean, which takes none), and how to set and show it.
// This table is the single source of the command line (ParseTrainArgs builds
// its CLI11 options from it), the config files and the help text.
struct Key {
  const char* name;
  const char* help;
  const char* type;
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
  Key{NAME, HELP, "INT", [](TrainConfig& c, const std::string& v) { return ParseInt(NAME, v, c.FIELD); }, \
      [](const TrainConfig& c) { return std::to_string(c.FIELD); }}
#define DBL_KEY(NAME, FIELD, HELP)                                                              \
  Key{NAME, HELP, "NUM", [](TrainConfig& c, const std::string& v) { return ParseDouble(NAME, v, c.FIELD); }, \
      [](const TrainConfig& c) { return Num(c.FIELD); }}
#define STR_KEY(NAME, FIELD, HELP)                                                          \
  Key{NAME, HELP, "TEXT", [](TrainConfig& c, const std::string& v) { c.FIELD = v; return Status::OK(); }, \
      [](const TrainConfig& c) { return c.FIELD; }}
#define BOOL_KEY(NAME, FIELD, HELP)                                                           \
  Key{NAME, HELP, "", [](TrainConfig& c, const std::string& v) { return ParseBool(NAME, v, c.FIELD); }, \
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
      STR_KEY("dist-backend", dist_backend, "CUDA ranks' gradient all-reduce: auto (NCCL when each rank has its own GPU), gloo or nccl"),
      STR_KEY("elastic-comm", elastic_comm, "elastic jobs' communicator: ring (regroups touching two peers) or gloo"),
      INT_KEY("ring-group", ring_group, "the ring's all-reduce in groups of this many ranks, then across them; 1 flat, 0 auto"),
      INT_KEY("elastic-replicas", elastic_replicas,
              "elastic data parallelism: the job's full width N; the global batch stays N x --batch-size on fewer ranks"),
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

const Key* FindKey(const std::string& key) {
  for (const Key& k : Keys())
    if (key == k.name) return &k;
  return nullptr;
}

Status UnknownKey(const std::string& key, const std::string& where) {
  std::vector<std::string> names;
  for (const Key& k : Keys()) names.push_back(k.name);
  const std::string best = Nearest(key, names);
  std::string dashes = where == "flag" ? "--" : "";
  std::string msg = "unknown " + where + " '" + dashes + key + "'";
  if (!best.empty()) msg += "; did you mean '" + dashes + best + "'?";
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
  if (elastic_replicas < 0 || elastic_replicas > kMaxElasticReplicas) {
    return Status::InvalidArgument("--elastic-replicas must be in [0, " + std::to_string(kMaxElasticReplicas) +
                                   "] (WORLD_SIZE's range); 0 turns elastic data parallelism off");
  }
  if (ring_group < 0) return Status::InvalidArgument("--ring-group must be 0 (auto), 1 (flat) or a group size");
  if (dist_backend != "auto" && dist_backend != "gloo" && dist_backend != "nccl") {
    return Status::InvalidArgument("--dist-backend '" + dist_backend + "' is not one of: auto, gloo, nccl");
  }
  if (dist_backend == "nccl" && elastic_replicas > 0) {
    return Status::InvalidArgument("--dist-backend nccl: elastic replicas reduce exactly over their ring; "
                                   "use gloo or auto with --elastic-replicas");
  }
  if (elastic_comm != "ring" && elastic_comm != "gloo") {
    return Status::InvalidArgument("--elastic-comm '" + elastic_comm + "' is not ring or gloo");
  }
  if (elastic_replicas > 0 && shard_optimizer && pp > 1) {
    return Status::InvalidArgument("--shard-optimizer is built for elastic data parallelism, not elastic pipelines; "
                                   "drop --shard-optimizer or --pp");
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

namespace {

// Raised by an option's callback: the key's own one-line error, reported as
// it is rather than as CLI11's wording.
struct KeyError {
  Status status;
};

std::string ShownValue(const std::string& v) { return v.empty() ? "none" : v; }

// The command line as CLI11 sees it, built from Keys(): one option per key,
// whose callback is the key's `set`, so a bad value gives the same error as
// the same key in a config file. `cfg` is what the callbacks set and what
// the help shows as each key's default. --config was applied before parsing
// (flags win over it wherever they stand), so here it only takes its value.
void BuildApp(CLI::App& app, TrainConfig& cfg) {
  app.name("bulwark-train");
  app.description(
      "bulwark-train: the C++ LLM trainer bulwark supervises.\n"
      "  bulwark-train [--config tiny|small|FILE] [--key value ...]\n"
      "  bulwark-train prepare --corpus kjv|PATH --out DIR [--vocab-size N] [--val-fraction F]\n"
      "  bulwark-train ... --align [--align-threads N] [--align-steps S] [--align-stage K]   bitwise alignment check, replay (stop-time ladder)\n"
      "  bulwark-train --net-check [--net-timeout S]   one network link, under RANK/WORLD_SIZE=2/MASTER_*\n"
      "Every key is also valid as a 'key = value' line in a config file; '-' and '_' are interchangeable.");
  app.allow_extras();  // unknown flags are reported by ParseTrainArgs, with the nearest key
  app.get_formatter()->column_width(34);
  // (A const string: CLI11 would take a mutable one for the variable to fill.)
  const std::string config_help =
      "preset (tiny, small) or a file of 'key = value' lines; flags override it [" + cfg.preset + "]";
  app.add_option("--config", config_help)
      ->type_name("NAME|FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const Key& k : Keys()) {
    const Key* key = &k;
    const std::string help = std::string(k.help) + " [" + ShownValue(k.get(cfg)) + "]";
    CLI::Option* o = app.add_option(
        std::string("--") + k.name,
        [key, &cfg](const CLI::results_t& values) {
          Status s = key->set(cfg, values.empty() ? "" : values.back());
          if (!s.ok()) throw KeyError{s};
          return true;
        },
        help);
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if (*k.type == '\0') {
      o->expected(0);  // --resume, or --resume=false
    } else {
      o->type_name(k.type);
    }
  }
}

// "--batch_size=3" -> "--batch-size=3": keys take '-' or '_' alike. And
// "--ckpt-dir=" -> "--ckpt-dir" "": an explicitly empty value, which CLI11
// would otherwise fill with the next word.
std::vector<std::string> CanonicalFlags(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (std::string a : args) {
    if (a.rfind("--", 0) == 0) {
      const size_t eq = a.find('=');
      std::replace(a.begin(), eq == std::string::npos ? a.end() : a.begin() + static_cast<long>(eq), '_', '-');
      if (eq + 1 == a.size()) {
        const Key* k = FindKey(a.substr(2, eq - 2));
        if (k && *k->type != '\0') {
          out.push_back(a.substr(0, eq));
          out.push_back("");
          continue;
        }
      }
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace

Result<TrainConfig> ParseTrainArgs(const std::vector<std::string>& raw_args) {
  const std::vector<std::string> args = CanonicalFlags(raw_args);
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

  CLI::App app;
  BuildApp(app, cfg);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    app.parse(reversed);
  } catch (const KeyError& e) {
    return e.status;
  } catch (const CLI::ArgumentMismatch& e) {
    // "--steps: 1 required INT missing": the flag ended the line.
    const std::string what = e.what();
    return Status::InvalidArgument("flag " + what.substr(0, what.find(':')) + " needs a value");
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(std::string(e.what()) + " (bulwark-train --help lists every key)");
  }
  for (const std::string& extra : app.remaining()) {
    if (extra.rfind("-", 0) != 0) {
      return Status::InvalidArgument("unexpected argument '" + extra + "'; flags look like --key value");
    }
    std::string key = extra.substr(extra.rfind("--", 0) == 0 ? 2 : 1);
    return UnknownKey(key.substr(0, key.find('=')), "flag");
  }
  cfg.model.poet.enabled = cfg.optimizer == "poet";
  return cfg;
}

std::string UsageText(const TrainConfig& shown) {
  TrainConfig cfg = shown;
  CLI::App app;
  BuildApp(app, cfg);
  return app.help();
}

}  // namespace bulwark::trainer
