// gpumeter demo: the main job end to end. Without a GPU: a bundled workload on a SIMULATED H100 (the fake
// NVML library and a bundled scenario), progress through the Python client, a forecast stop, the report.
// With a GPU: the same job on the GPU. The job is a real PyTorch training loop when torch is importable.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <vector>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/plan_demo.h"
#include "cli/run_support.h"
#include "cli/trace_demo.h"
#include "gpu/gpu.h"
#include "util/embedded.h"
#include "util/exit_codes.h"

namespace gm::cli {
namespace {

namespace fs = std::filesystem;

std::string self_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

/// The first of $`env` and the `relative` paths under the binary's folder where `marker` (appended) exists:
/// the fake NVML library (next to the binary in build/fake_nvml/, else installed) and the Python client.
std::optional<std::string> find_installed(const char* env, std::initializer_list<const char*> relative,
                                          const std::string& marker) {
  std::vector<std::string> candidates;
  if (const char* e = std::getenv(env); e && *e) candidates.push_back(e);
  for (const char* r : relative) candidates.push_back(self_dir() + r);
  for (const auto& c : candidates)
    if (fs::exists(c + marker)) return c;
  return std::nullopt;
}

/// The Python that runs the demo's job: the first of `python3` on PATH and /usr/bin/python3 that can import
/// torch (Debian's python3-torch lives under /usr/bin/python3), else `python3` for the stand-in loop.
std::string demo_python() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(py) + " -c 'import torch' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return py;
  }
  return "python3";
}

}  // namespace

int cmd_demo(int argc, char** argv) {
  CLI::App app{"Run the main job end to end on this machine (a SIMULATED GPU when there is none)", "demo"};
  bool simulate = false;
  app.add_flag("--simulate", simulate, "use the simulated H100 even when a GPU is present");
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  bool real_gpu = false;
  if (!simulate) {
    if (auto b = gpu::open_gpu_backend(); b && !(*b)->devices().empty()) real_gpu = true;
  }
  char tmpl[] = "/tmp/gpumeter-demo-XXXXXX";
  if (!mkdtemp(tmpl)) return fail("demo", make_error("cannot create a temporary directory"));
  const std::string dir = tmpl;
  if (!real_gpu) {
    auto lib =
        find_installed("GPUMETER_FAKE_NVML",
                       {"/fake_nvml/libnvidia-ml.so.1", "/../lib/gpumeter/fake_nvml/libnvidia-ml.so.1"}, "");
    if (!lib)
      return fail(
          "demo",
          make_error(ErrorKind::no_gpu_library,
                     "no GPU here and the simulated NVML library (fake_nvml/libnvidia-ml.so.1) was not "
                     "found next to gpumeter; build it with `make build` or set GPUMETER_FAKE_NVML"));
    // data/demo/scenario.json: one H100, idle for the first 3 s (the job's start-up: Python, PyTorch, the
    // model, which the report shows as startup_overhead), then 93 % busy under any process named python*.
    const std::string scen = dir + "/scenario.json";
    std::ofstream(scen) << util::embedded_file("demo/scenario.json").value_or("");
    setenv("GPUMETER_NVML_LIBRARY", lib->c_str(), 1);
    setenv("FAKE_NVML_SCENARIO", scen.c_str(), 1);
    setenv("GPUMETER_DEMO_SIMULATED", "1", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
  }
  if (auto py = find_installed("GPUMETER_PYTHON_DIR", {"/../python", "/../share/gpumeter/python"},
                               "/gpumeter/__init__.py")) {
    const char* old = std::getenv("PYTHONPATH");
    setenv("PYTHONPATH", (old && *old ? *py + ":" + old : *py).c_str(), 1);
  }
  // data/demo/job.py: a real PyTorch training loop when torch is importable, else a stand-in loop.
  const std::string workload = dir + "/train.py";
  std::ofstream(workload) << util::embedded_file("demo/job.py").value_or("");
  const char* tag = real_gpu ? "" : "SIMULATED ";
  std::printf("%s== gpumeter demo: %s ==\n", tag,
              real_gpu ? "metering a short real workload on this machine's GPU"
                       : "no GPU here, so this is a SIMULATED H100 (fake NVML library + bundled scenario)");

  // The budget is set to about 20 s of this GPU at its price, so the long workload trips the forecast stop.
  auto prices = meter::PricingContext::open({}, std::make_unique<meter::DmiInstanceDetector>());
  if (!prices) return fail("demo", prices.error());
  auto backend = gpu::open_gpu_backend();
  if (!backend) return fail("demo", backend.error());
  std::optional<std::string> gpu_name;
  if (!(*backend)->devices().empty()) gpu_name = (*backend)->devices().front().name;
  const auto n_gpus = std::max<std::size_t>(1, (*backend)->devices().size());
  backend->reset();
  RunFlags f;
  auto price = prices->price_for(gpu_name);
  if (!price) return fail("demo", price.error());
  if (!price->quote) {
    f.pricing.price_usd_per_gpu_hour = 4.0;  // no catalog price for this GPU: say so and use a round figure
    std::printf("%sno catalog price for this GPU; the demo uses --price 4\n", tag);
  }
  // Twenty seconds of the GPUs at their price.
  const MicroUsd price_micros = price->quote ? price->quote->micros_per_gpu_hour : util::usd_to_micros(4.0);
  f.budget =
      util::usd_decimal(meter::scale_micros(price_micros, static_cast<double>(n_gpus) * 20.0 / 3600.0));
  f.forecast_stop = true;
  f.grace = "5s";
  f.warn_at = "50%";
  f.ledger = dir + "/ledger.db";
  f.json_report = dir + "/report.json";
  f.labels = {"demo=1"};
  f.command = {demo_python(), workload};
  std::printf("%sgpumeter run --budget %s --forecast-stop --grace 5s -- python3 train.py\n", tag,
              f.budget->c_str());
  std::fflush(stdout);
  const int rc = execute_run(f, !real_gpu);

  std::printf("%sThe run was %s; exit code %d (%s). JSON report: %s, ledger: %s\n", tag,
              rc == util::kExitGuardStop ? "stopped by the guard" : "not stopped", rc,
              rc == util::kExitGuardStop ? "86 = gpumeter stopped the job" : "the job's own",
              f.json_report->c_str(), f.ledger->c_str());
  std::printf(
      "\n== Where the money goes in a PyTorch profiler trace (bundled H100 sample: `gpumeter trace`) ==\n");
  std::fflush(stdout);
  {
    // The bundled trace was recorded on an H100: price it as `gpumeter trace` would (no instance detection).
    std::optional<MicroUsd> trace_price;
    std::string trace_source;
    auto trace_prices = meter::PricingContext::open({}, nullptr);
    if (!trace_prices) return fail("demo", trace_prices.error());
    auto h100 = trace_prices->price_for(std::string("NVIDIA H100 80GB HBM3"));
    if (h100 && h100->quote) {
      trace_price = h100->quote->micros_per_gpu_hour;
      trace_source = h100->quote->source;
    }
    trace_demo_section(trace_price, trace_source);
  }
  std::printf("\n== Before renting: will it fit, where, how long, how much (`gpumeter plan`) ==\n");
  std::fflush(stdout);
  plan_demo_section(stdout);
  return rc == util::kExitGuardStop ? util::kExitOk : rc;
}

}  // namespace gm::cli
