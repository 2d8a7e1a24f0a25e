// `bulwark demo` and the benchmarks that drive a local cluster (src/demo/):
// their flags read into the options src/demo/demo.h defines.
#pragma once

#include "cli/args.h"
#include "common/status.h"

namespace bulwark::cli {

Status DemoCmd(const Args& a);
Status BenchRecoveryCmd(const Args& a);
Status BenchCompareCmd(const Args& a);
Status BenchLadderCmd(const Args& a);
Status BenchImplicitCmd(const Args& a);
Status BenchCheckpointCmd(const Args& a);
// bulwark-plane-bench beside this binary (bench/plane), run in its place.
Status BenchPlaneCmd(const Args& a);

}  // namespace bulwark::cli
