// Fuzzes the trainer's config-file parser (trainer/config.h: the "key =
// value" lines of `--config FILE`), then validates the result as
// bulwark-train does before building a model. Needs no libtorch: config.cc
// is part of bulwark_data.
#include <cstdint>
#include <string>

#include "trainer/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cfg = bulwark::trainer::Preset("tiny");
  if (!cfg.ok()) __builtin_trap();
  if (!bulwark::trainer::ApplyConfigText(*cfg, text, "fuzz.cfg").ok()) return 0;
  cfg->model.poet.enabled = cfg->optimizer == "poet";
  if (cfg->Validate().ok()) cfg->model.ShapeString();
  return 0;
}
