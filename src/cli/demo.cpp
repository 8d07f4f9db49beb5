// gpumeter demo: the main job end to end. Without a GPU: a bundled workload on a SIMULATED H100 (the fake
// NVML library and a bundled scenario), progress through the Python client, a forecast stop, the report.
// With a GPU: a short real workload (PyTorch if importable, else a busy loop) metered the same way.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/plan_demo.h"
#include "cli/trace_demo.h"
#include "cli/common.h"
#include "cli/run_support.h"
#include "gpu/gpu.h"
#include "util/exit_codes.h"

namespace gm::cli {
namespace {

namespace fs = std::filesystem;

std::string self_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

/// The fake NVML library: $GPUMETER_FAKE_NVML, else next to the binary (build/fake_nvml/), else installed.
std::optional<std::string> find_fake_nvml() {
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("GPUMETER_FAKE_NVML"); e && *e) candidates.push_back(e);
  candidates.push_back(self_dir() + "/fake_nvml/libnvidia-ml.so.1");
  candidates.push_back(self_dir() + "/../lib/gpumeter/fake_nvml/libnvidia-ml.so.1");
  for (const auto& c : candidates)
    if (fs::exists(c)) return c;
  return std::nullopt;
}

/// The Python client directory: $GPUMETER_PYTHON_DIR, the source tree next to the build, or installed.
std::optional<std::string> find_python_client() {
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("GPUMETER_PYTHON_DIR"); e && *e) candidates.push_back(e);
  candidates.push_back(self_dir() + "/../python");
  candidates.push_back(self_dir() + "/../share/gpumeter/python");
  for (const auto& c : candidates)
    if (fs::exists(c + "/gpumeter/__init__.py")) return c;
  return std::nullopt;
}

std::string simulated_scenario() {
  nlohmann::json procs = nlohmann::json::array();
  for (const char* comm : {"python3", "python", "python3.11", "python3.12", "python3.13", "python3.10", "python3.9"})
    procs.push_back({{"comm", comm}, {"mem_mib", 30500}, {"sm_util", 93}});
  nlohmann::json j = {
      {"driver_version", "580.95.05"},
      {"devices",
       {{{"name", "NVIDIA H100 80GB HBM3"},
         {"uuid", "GPU-5d1a0000-0000-4000-8000-00000000d3e0"},
         {"pci_bus_id", "00000000:18:00.0"},
         {"memory_total_mib", 81559},
         {"power_limit_w", 700},
         {"energy_counter", true},
         {"mig", false},
         {"timeline",
          {{{"t", 0}, {"util", 0}, {"mem_used_mib", 500}, {"power_w", 72}, {"temp_c", 34}, {"processes", nlohmann::json::array()}},
           {{"t", 1}, {"util", 93}, {"mem_used_mib", 31000}, {"power_w", 610}, {"temp_c", 67}, {"processes", procs}}}}}}}};
  return j.dump(2);
}

// A training-like loop: 2000 steps of 50 ms, reported through the Python client (or raw datagrams when the
// client is not installed); it would take ~100 s, which the forecast sees is far over the demo budget.
const char* kWorkload = R"PY(
import json, os, signal, socket, sys, time
simulated = os.environ.get("GPUMETER_DEMO_SIMULATED") == "1"
tag = "SIMULATED " if simulated else ""
try:
    import gpumeter
    report = gpumeter.progress
except ImportError:
    _s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    def report(**kw):
        _s.sendto(json.dumps(kw).encode(), os.environ["GPUMETER_SOCKET"])
def stop(*_):
    print(f"{tag}workload: stop signal received, writing a checkpoint and exiting", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
use_torch = False
if not simulated:
    try:
        import torch
        use_torch = torch.cuda.is_available()
    except ImportError:
        pass
total = 2000
if use_torch:
    a = torch.randn(4096, 4096, device="cuda")
t0 = time.monotonic()
for step in range(1, total + 1):
    if use_torch:
        for _ in range(4):
            a = a @ a
            a = a / a.norm()
        torch.cuda.synchronize()
    else:
        deadline = t0 + step * 0.05
        while time.monotonic() < deadline:
            time.sleep(0.005)
    loss = 2.5 / (1 + step / 300)
    report(step=step, total_steps=total, samples=step * 32, tokens=step * 32 * 512, metrics={"loss": loss})
    if step % 20 == 0:
        print(f"{tag}workload: step {step}/{total} loss {loss:.3f}", flush=True)
)PY";

}  // namespace

int cmd_demo(int argc, char** argv) {
  CLI::App app{"Run the main job end to end on this machine (a SIMULATED GPU when there is none)", "demo"};
  bool simulate = false;
  app.add_flag("--simulate", simulate, "use the simulated H100 even when a GPU is present");
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  bool real_gpu = false;
  if (!simulate) {
    if (auto b = open_nvml(); b && !(*b)->devices().empty()) real_gpu = true;
  }
  char tmpl[] = "/tmp/gpumeter-demo-XXXXXX";
  if (!mkdtemp(tmpl)) return fail("demo", make_error("cannot create a temporary directory"));
  const std::string dir = tmpl;
  if (!real_gpu) {
    auto lib = find_fake_nvml();
    if (!lib)
      return fail("demo", make_error(ErrorKind::no_nvml,
                                     "no GPU here and the simulated NVML library (fake_nvml/libnvidia-ml.so.1) was not "
                                     "found next to gpumeter; build it with `make build` or set GPUMETER_FAKE_NVML"));
    const std::string scen = dir + "/scenario.json";
    std::ofstream(scen) << simulated_scenario();
    setenv("GPUMETER_NVML_LIBRARY", lib->c_str(), 1);
    setenv("FAKE_NVML_SCENARIO", scen.c_str(), 1);
    setenv("GPUMETER_DEMO_SIMULATED", "1", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
  }
  if (auto py = find_python_client()) {
    const char* old = std::getenv("PYTHONPATH");
    setenv("PYTHONPATH", (old && *old ? *py + ":" + old : *py).c_str(), 1);
  }
  const std::string workload = dir + "/train.py";
  std::ofstream(workload) << kWorkload;
  const char* tag = real_gpu ? "" : "SIMULATED ";
  std::printf("%s== gpumeter demo: %s ==\n", tag,
              real_gpu ? "metering a short real workload on this machine's GPU"
                       : "no GPU here, so this is a SIMULATED H100 (fake NVML library + bundled scenario)");

  // The budget is set to about 20 s of this GPU at its price, so the 100 s workload trips the forecast stop.
  auto catalog = Catalog::builtin();
  if (!catalog) return fail("demo", catalog.error());
  auto backend = open_nvml();
  if (!backend) return fail("demo", backend.error());
  std::optional<std::string> gpu_name;
  if (!(*backend)->devices().empty()) gpu_name = (*backend)->devices().front().name;
  const auto n_gpus = std::max<std::size_t>(1, (*backend)->devices().size());
  backend->reset();
  RunFlags f;
  DmiInstanceDetector dmi;
  auto price = resolve_price(f.pricing, *catalog, gpu_name, &dmi);
  if (!price) {
    f.pricing.price_usd_per_gpu_hour = 4.0;  // no catalog price for this GPU: say so and use a round figure
    std::printf("%sno catalog price for this GPU; the demo uses --price 4\n", tag);
  }
  const double usd_per_s = (price ? price->usd_per_gpu_hour() : 4.0) * static_cast<double>(n_gpus) / 3600.0;
  f.budget_usd = usd_per_s * 20.0;
  f.forecast_stop = true;
  f.grace = "5s";
  f.warn_at = "50%";
  f.ledger = dir + "/ledger.db";
  f.json_report = dir + "/report.json";
  f.labels = {"demo=1"};
  f.command = {"python3", workload};
  std::printf("%sgpumeter run --budget %.4f --forecast-stop --grace 5s -- python3 train.py\n", tag, *f.budget_usd);
  std::fflush(stdout);
  const int rc = execute_run(f, !real_gpu);

  std::printf("%sThe run was %s; exit code %d (%s). JSON report: %s, ledger: %s\n", tag,
              rc == kExitGuardStop ? "stopped by the guard" : "not stopped", rc,
              rc == kExitGuardStop ? "86 = gpumeter stopped the job" : "the job's own", f.json_report->c_str(),
              f.ledger->c_str());
  std::printf("\n== Where the money goes in a PyTorch profiler trace (bundled H100 sample: `gpumeter trace`) ==\n");
  std::fflush(stdout);
  {
    std::optional<double> trace_price;
    std::string trace_source;
    if (auto builtin = Catalog::builtin())
      if (auto ref = builtin->reference_price("H100 SXM 80GB")) {
        trace_price = ref->usd_per_gpu_hour;
        trace_source = fmt::format("catalog reference: median on-demand $/GPU-h of {} H100 SXM 80GB offers", ref->offers);
      }
    trace_demo_section(trace_price, trace_source);
  }
  std::printf("\n== Before renting: will it fit, where, how long, how much (`gpumeter plan`) ==\n");
  std::fflush(stdout);
  plan_demo_section(stdout);
  return rc == kExitGuardStop ? kExitOk : rc;
}

}  // namespace gm::cli
