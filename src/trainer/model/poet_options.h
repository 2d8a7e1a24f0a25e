// POET's settings (see poet.h for the method). Kept free of libtorch so the
// configuration layer and its tests build without it.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace bulwark::trainer {

struct PoetOptions {
  bool enabled = false;
  std::string variant = "bs";      // bs | fs
  int block_size = 64;             // BS: b
  double fs_fraction = 0.5;        // FS: b as a fraction of each side's width
  int neumann_terms = 4;           // k; even k keeps R R^T - I = O(|Q|^(2k+2)): docs/poet.md
  int64_t merge_every = 200;       // T_m
  std::string init = "normalized"; // W0: normalized | standard | uniform-spectrum
  double lr = 0;                   // 0: from the block size (reference tables)
  std::string apply = "weight";    // weight: form R W0 P per step; activations: rotate x and y
  int64_t diag_every = 0;          // diagnostics every N steps (json log), 0: off

  // The POET learning rate: 1e-3 at BS b=256 or FS 1/2, doubling as b
  // halves, at most 4e-3.
  double EffectiveLr() const;
  std::string ShapeString() const;  // the settings that change parameter shapes
  Status Validate() const;
};

// Trainable parameters of one POET layer: (m+n)(b-1)/2 for BS,
// b_out(b_out-1)/2 + b_in(b_in-1)/2 for FS.
int64_t PoetParameterCount(int64_t in, int64_t out, const PoetOptions& opts);

}  // namespace bulwark::trainer
