#include "trainer/model/poet_options.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace bulwark::trainer {

// ----------------------------------------------------------------------------
// Options

double PoetOptions::EffectiveLr() const {
  if (lr > 0) return lr;
  // Reference tables: BS b=256 or FS 1/2 -> 1e-3; halving b doubles it, up to
  // the tables' largest value, 4e-3 (b=64, 1/8). Extrapolating further lets Q
  // outgrow the Neumann series between merges: measured on the tiny model
  // with b=16, lr 1.6e-2 drifted the spectrum by 3.6% over 12 merges where
  // 4e-3 drifted it by less than 1e-5 (k=4).
  double x = variant == "bs" ? 1e-3 * 256.0 / block_size : 1e-3 * 0.5 / fs_fraction;
  return std::min(x, 4e-3);
}

std::string PoetOptions::ShapeString() const {
  std::ostringstream s;
  s << "poet=" << variant << "/";
  if (variant == "bs") s << "b" << block_size;
  else s << "f" << fs_fraction;
  return s.str();
}

Status PoetOptions::Validate() const {
  if (variant != "bs" && variant != "fs") {
    return Status::InvalidArgument("--poet-variant '" + variant + "' is not one of: bs, fs");
  }
  if (variant == "bs" && block_size < 2) return Status::InvalidArgument("--poet-block-size must be at least 2");
  if (!(fs_fraction > 0 && fs_fraction <= 1)) {
    return Status::InvalidArgument("--poet-fs-fraction must lie in (0, 1], got " + std::to_string(fs_fraction));
  }
  if (neumann_terms < 1) {
    return Status::InvalidArgument("--poet-neumann-terms must be at least 1 (k = 0 gives R = I + Q, which diverges)");
  }
  if (merge_every < 1) return Status::InvalidArgument("--poet-merge-every must be at least 1");
  if (init != "normalized" && init != "standard" && init != "uniform-spectrum") {
    return Status::InvalidArgument("--poet-init '" + init + "' is not one of: normalized, standard, uniform-spectrum");
  }
  if (apply != "weight" && apply != "activations") {
    return Status::InvalidArgument("--poet-apply '" + apply + "' is not one of: weight, activations");
  }
  if (apply == "activations" && variant != "bs") {
    return Status::InvalidArgument("--poet-apply activations is implemented for --poet-variant bs only");
  }
  if (lr < 0 || diag_every < 0) return Status::InvalidArgument("--poet-lr and --poet-diag-every must not be negative");
  return Status::OK();
}

int64_t PoetParameterCount(int64_t in, int64_t out, const PoetOptions& o) {
  if (o.variant == "bs") return (in + out) * (o.block_size - 1) / 2;
  auto side = [&](int64_t w) {
    int64_t b = std::max<int64_t>(2, std::llround(o.fs_fraction * w));
    return b * (b - 1) / 2;
  };
  return side(in) + side(out);
}

}  // namespace bulwark::trainer
