// gpumeter demo: the main job end to end. Without a GPU: a bundled workload on a SIMULATED H100 (the fake
// NVML library and a bundled scenario), progress through the Python client, a forecast stop, the report.
// With a GPU: the same job on the GPU. The job is a real PyTorch training loop when torch is importable.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/plan_demo.h"
#include "cli/run_support.h"
#include "cli/trace_demo.h"
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

/// The Python that runs the demo's job: the first of `python3` on PATH and /usr/bin/python3 that can import
/// torch (Debian's python3-torch lives under /usr/bin/python3), else `python3` for the stand-in loop.
std::string demo_python() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(py) + " -c 'import torch' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return py;
  }
  return "python3";
}

std::string simulated_scenario() {
  nlohmann::json procs = nlohmann::json::array();
  for (const char* comm :
       {"python3", "python", "python3.11", "python3.12", "python3.13", "python3.10", "python3.9"})
    procs.push_back({{"comm", comm}, {"mem_mib", 30500}, {"sm_util", 93}});
  nlohmann::json j = {{"driver_version", "580.95.05"},
                      {"devices",
                       {{{"name", "NVIDIA H100 80GB HBM3"},
                         {"uuid", "GPU-5d1a0000-0000-4000-8000-00000000d3e0"},
                         {"pci_bus_id", "00000000:18:00.0"},
                         {"memory_total_mib", 81559},
                         {"power_limit_w", 700},
                         {"energy_counter", true},
                         {"mig", false},
                         {"timeline",
                          {{{"t", 0},
                            {"util", 0},
                            {"mem_used_mib", 500},
                            {"power_w", 72},
                            {"temp_c", 34},
                            {"processes", nlohmann::json::array()}},
                           // Idle for the first 3 s: the job's start-up (Python, PyTorch, the model), which
                           // the report shows as startup_overhead.
                           {{"t", 3},
                            {"util", 93},
                            {"mem_used_mib", 31000},
                            {"power_w", 610},
                            {"temp_c", 67},
                            {"processes", procs}}}}}}}};
  return j.dump(2);
}

// The demo's job. With PyTorch importable: a small transformer language model trained on synthetic tokens
// (CPU on a machine without a GPU, the GPU otherwise) for 2000 steps; without PyTorch: a stand-in loop of
// 50 ms steps. Either reports through the Python client (raw datagrams when the client is missing), takes
// SIGTERM as "checkpoint at the end of this step", and would run far past the demo budget.
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
stop_requested = False
def stop(*_):
    global stop_requested
    stop_requested = True
signal.signal(signal.SIGTERM, stop)
try:
    import torch
except ImportError:
    torch = None
total, batch, seq = 2000, 8, 32
ckpt = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoint.pt")
if torch is not None:
    device = "cuda" if (not simulated and torch.cuda.is_available()) else "cpu"
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a small model: one thread is fastest, and steady on a busy machine
    vocab, d = 256, 64
    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.pos = torch.nn.Parameter(torch.zeros(seq, d))
            layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True)
            self.blocks = torch.nn.TransformerEncoder(layer, 2)
            self.head = torch.nn.Linear(d, vocab)
        def forward(self, x):
            n = x.shape[1]
            causal = torch.triu(torch.full((n, n), float("-inf"), device=x.device), 1)
            return self.head(self.blocks(self.emb(x) + self.pos[:n], mask=causal))
    model = TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    params = sum(p.numel() for p in model.parameters())
    print(f"{tag}workload: PyTorch {torch.__version__} on {device}: a {params/1e6:.2f}M-parameter transformer LM, "
          f"{total} steps of {batch}x{seq} synthetic tokens", flush=True)
    def train_step():
        start = torch.randint(0, vocab, (batch, 1), device=device)
        tokens = (start + torch.arange(seq + 1, device=device)) % vocab  # learnable: next = previous + 1
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)
else:
    print(f"{tag}workload: PyTorch is not installed: a stand-in loop of 50 ms steps", flush=True)
    t0 = time.monotonic()
    def train_step():
        deadline = t0 + step * 0.05
        while time.monotonic() < deadline:
            time.sleep(0.005)
        return 2.5 / (1 + step / 300)
for step in range(1, total + 1):
    loss = train_step()
    report(step=step, total_steps=total, samples=step * batch, tokens=step * batch * seq, metrics={"loss": loss})
    if step % 25 == 0:
        print(f"{tag}workload: step {step}/{total} loss {loss:.3f}", flush=True)
    if stop_requested:
        if torch is not None:
            torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, ckpt)
        print(f"{tag}workload: stop signal received: checkpoint of step {step} written, exiting", flush=True)
        sys.exit(0)
)PY";

}  // namespace

int cmd_demo(int argc, char** argv) {
  CLI::App app{"Run the main job end to end on this machine (a SIMULATED GPU when there is none)", "demo"};
  bool simulate = false;
  app.add_flag("--simulate", simulate, "use the simulated H100 even when a GPU is present");
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  bool real_gpu = false;
  if (!simulate) {
    if (auto b = open_gpu_backend(); b && !(*b)->devices().empty()) real_gpu = true;
  }
  char tmpl[] = "/tmp/gpumeter-demo-XXXXXX";
  if (!mkdtemp(tmpl)) return fail("demo", make_error("cannot create a temporary directory"));
  const std::string dir = tmpl;
  if (!real_gpu) {
    auto lib = find_fake_nvml();
    if (!lib)
      return fail(
          "demo",
          make_error(ErrorKind::no_gpu_library,
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

  // The budget is set to about 20 s of this GPU at its price, so the long workload trips the forecast stop.
  auto prices = PricingContext::open({}, std::make_unique<DmiInstanceDetector>());
  if (!prices) return fail("demo", prices.error());
  auto backend = open_gpu_backend();
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
  const MicroUsd price_micros = price->quote ? price->quote->micros_per_gpu_hour : 4 * kMicrosPerUsd;
  f.budget = usd_decimal(scale_micros(price_micros, static_cast<double>(n_gpus) * 20.0 / 3600.0));
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
              rc == kExitGuardStop ? "stopped by the guard" : "not stopped", rc,
              rc == kExitGuardStop ? "86 = gpumeter stopped the job" : "the job's own",
              f.json_report->c_str(), f.ledger->c_str());
  std::printf(
      "\n== Where the money goes in a PyTorch profiler trace (bundled H100 sample: `gpumeter trace`) ==\n");
  std::fflush(stdout);
  {
    // The bundled trace was recorded on an H100: price it as `gpumeter trace` would (no instance detection).
    std::optional<MicroUsd> trace_price;
    std::string trace_source;
    auto trace_prices = PricingContext::open({}, nullptr);
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
  return rc == kExitGuardStop ? kExitOk : rc;
}

}  // namespace gm::cli
