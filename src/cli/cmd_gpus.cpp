// gpumeter gpus [--json]: devices now, with readings, processes and $/h.
#include <cstdio>

#include "cli/cli.h"
#include "cli/common.h"
#include "gpu/gpu.h"
#include "report/gpu_view.h"

namespace gm::cli {

int cmd_gpus(int argc, char** argv) {
  CLI::App app{"Devices now: model, utilization, memory, power, processes, $/h", "gpus"};
  bool as_json = false;
  meter::PricingOptions pricing;
  app.add_flag("--json", as_json, "machine-readable output");
  add_pricing_flags(app, pricing);
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  auto backend = gpu::open_gpu_backend();
  if (!backend) return fail("gpus", backend.error());
  auto prices = meter::PricingContext::open(pricing, std::make_unique<meter::DmiInstanceDetector>());
  if (!prices) return fail("gpus", prices.error());
  auto view = report::build_gpu_view(**backend, *prices);
  if (!view) return fail("gpus", view.error());
  const auto driver = (*backend)->driver_version();
  std::fputs(
      (as_json ? report::render_gpus_json(*view, driver) : report::render_gpus_text(*view, driver)).c_str(),
      stdout);
  return util::kExitOk;
}

}  // namespace gm::cli
