// Overhead of `gpumeter run` on a CPU-bound child: wall time of the child alone vs under gpumeter (fake NVML
// scenario, private ledger), alternating, best of N each. Prints the ratio; the claim is < 1 %.
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

const char* kChild = "i=0; s=0; while [ $i -lt 4000000 ]; do s=$((s+i)); i=$((i+1)); done";

std::string g_dir;
double g_direct_best = 1e9, g_metered_best = 1e9;

double run_wall_s(const std::vector<std::string>& argv) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_ChildDirect(benchmark::State& state) {
  for (auto _ : state) {
    const double s = run_wall_s({"sh", "-c", kChild});
    g_direct_best = std::min(g_direct_best, s);
    state.SetIterationTime(s);
  }
}

void BM_ChildUnderGpumeterRun(benchmark::State& state) {
  for (auto _ : state) {
    const double s = run_wall_s({GPUMETER_BINARY, "run", "--price", "3", "--quiet", "--", "sh", "-c", kChild});
    g_metered_best = std::min(g_metered_best, s);
    state.SetIterationTime(s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  char tmpl[] = "/tmp/gpumeter-bench-XXXXXX";
  g_dir = mkdtemp(tmpl);
  const std::string lib = std::filesystem::path(GPUMETER_BINARY).parent_path().string() + "/fake_nvml/libnvidia-ml.so.1";
  std::ofstream(g_dir + "/scenario.json")
      << R"({"driver_version":"580.95.05","devices":[{"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-bench",)"
         R"("pci_bus_id":"00000000:18:00.0","memory_total_mib":81559,"power_limit_w":700,"energy_counter":true,)"
         R"("mig":false,"timeline":[{"t":0,"util":97,"mem_used_mib":1000,"power_w":600,"temp_c":60,)"
         R"("processes":[{"comm":"sh","mem_mib":900,"sm_util":97}]}]}]})";
  setenv("GPUMETER_NVML_LIBRARY", lib.c_str(), 1);
  setenv("FAKE_NVML_SCENARIO", (g_dir + "/scenario.json").c_str(), 1);
  setenv("GPUMETER_LEDGER", (g_dir + "/ledger.db").c_str(), 1);
  benchmark::RegisterBenchmark("child_direct", BM_ChildDirect)->UseManualTime()->Iterations(1)->Repetitions(5)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("child_under_gpumeter_run", BM_ChildUnderGpumeterRun)->UseManualTime()->Iterations(1)->Repetitions(5)->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::printf("best wall: direct %.3f s, under gpumeter run %.3f s, overhead %+.2f %%\n", g_direct_best, g_metered_best,
              (g_metered_best / g_direct_best - 1.0) * 100.0);
  std::filesystem::remove_all(g_dir);
  return 0;
}
