// The IPython extension (`%load_ext gpumeter`) on real notebooks: nbclient executes them on a real ipykernel
// (Debian's python3-ipykernel, python3-nbclient, python3-nbformat under /usr/bin/python3) whose process,
// named python3, holds a fake-NVML A100; the extension runs the real `gpumeter attach` (issue 27).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "support/support.h"

namespace gm {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

/// One A100 at `util` % whose processes are every live process named python3 (the kernel among them).
std::string a100_scenario(int util) {
  nlohmann::json proc = {{"comm", "python3"}, {"mem_mib", 30000}, {"sm_util", util}};
  nlohmann::json j = {{"driver_version", "580.95.05"},
                      {"devices",
                       {{{"name", "NVIDIA A100-SXM4-80GB"},
                         {"uuid", "GPU-a100a100-2222-3333-4444-555555555555"},
                         {"pci_bus_id", "00000000:07:00.0"},
                         {"memory_total_mib", 81920},
                         {"power_limit_w", 400},
                         {"energy_counter", true},
                         {"mig", false},
                         {"timeline",
                          {{{"t", 0},
                            {"util", util},
                            {"mem_used_mib", 30500},
                            {"power_w", util > 5 ? 350 : 60},
                            {"temp_c", 50},
                            {"processes", {proc}}}}}}}}};
  return j.dump();
}

/// The text a person sees under cell `i`: streams, text/plain of displays and results, errors.
std::string cell_text(const nlohmann::json& nb, std::size_t i) {
  std::string out;
  auto join = [](const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    std::string s;
    for (const auto& x : v) s += x.get<std::string>();
    return s;
  };
  for (const auto& o : nb["cells"][i]["outputs"]) {
    const std::string type = o.value("output_type", "");
    if (type == "stream") out += join(o["text"]);
    if ((type == "display_data" || type == "execute_result") && o["data"].contains("text/plain"))
      out += join(o["data"]["text/plain"]) + "\n";
    if (type == "error") out += "ERROR " + o.value("ename", "") + ": " + o.value("evalue", "") + "\n";
  }
  return out;
}

bool cell_has_error(const nlohmann::json& nb, std::size_t i, const std::string& ename) {
  for (const auto& o : nb["cells"][i]["outputs"])
    if (o.value("output_type", "") == "error" && o.value("ename", "") == ename) return true;
  return false;
}

class NotebookIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test::fake_nvml_library())) << "fake NVML library not built";
    auto probe = test::run_command({kPython, "-c", "import ipykernel, nbclient, nbformat, IPython"});
    ASSERT_EQ(probe.exit_code, 0)
        << "python3-ipykernel, python3-nbclient and python3-nbformat are installed by "
           "scripts/setup.sh: "
        << probe.err;
  }
  std::map<std::string, std::string> env(int util = 90) {
    auto e = test::fake_env(dir_.write("scenario.json", a100_scenario(util)), dir_.path());
    e["PYTHONPATH"] = test::source_dir() + "/python";
    e["GPUMETER_BIN"] = test::gpumeter_binary();
    e["PATH"] = "/usr/bin:/bin";  // the kernel spec's python3 and nothing of the developer's
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    e["GPUMETER_SOCKET"] = "\x01unset";
    e["JUPYTER_RUNTIME_DIR"] = dir_.path() + "/runtime";
    e["IPYTHONDIR"] = dir_.path() + "/ipython";
    e["PYDEVD_DISABLE_FILE_VALIDATION"] = "1";
    return e;
  }
  /// Executes `cells` and returns the executed notebook.
  nlohmann::json execute(const std::vector<std::string>& cells, const std::map<std::string, std::string>& e,
                         const std::string& name = "nb") {
    const std::string in = dir_.write(name + ".json", nlohmann::json(cells).dump());
    const std::string out = dir_.path() + "/" + name + ".ipynb";
    auto r =
        test::run_command({kPython, test::source_dir() + "/tests/support/run_notebook.py", in, out, "150"}, e,
                          std::nullopt, 200);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return nlohmann::json::parse(test::read_file(out));
  }
  /// The newest notebook run of the ledger once its meter has recorded its end (the kernel has exited).
  nlohmann::json notebook_run(const std::map<std::string, std::string>& e) {
    nlohmann::json run;
    for (int i = 0; i < 100; ++i) {
      auto r = test::run_gpumeter({"runs", "--json"}, e);
      if (r.exit_code == 0) {
        for (const auto& x : nlohmann::json::parse(r.out))
          if (x["labels"].value("kind", "") == "notebook") {
            run = x;
            break;
          }
        if (!run.is_null() && run["status"] != "running") return run;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return run;
  }
  test::TempDir dir_;
};

double dollars(const std::string& text, const std::string& label) {
  std::smatch m;
  const std::regex re(label + R"( \$([0-9]+\.[0-9]+))");
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[1]);
}

TEST_F(NotebookIntegrationTest, BudgetInterruptsTheLoopTheKernelKeepsItsVariablesAndTheLedgerHasTheSession) {
  // $72/GPU-h on one A100 is 2 cents a second: the $0.60 budget is reached 30 s after the kernel started,
  // inside the loop (bounded at 60 s from its first cell).
  const auto e = env();
  const auto nb = execute({"%load_ext gpumeter",                                           // 0
                           "%gpumeter --price 72 --budget 0.60",                           // 1
                           "import time\nt0 = time.time()\ntime.sleep(3)\nwarm = 'warm'",  // 2
                           "steps = 0\nwhile time.time() - t0 < 60:\n"
                           "    time.sleep(0.05)\n    steps += 1",  // 3
                           "print('this cell must not run')",       // 4
                           "%gpumeter --budget 1.00",               // 5
                           "print('steps', steps > 100, warm)",     // 6
                           "%gpumeter",                             // 7
                           "%gpumeter cells"},                      // 8
                          e);
  const std::string badge = cell_text(nb, 0);
  EXPECT_NE(badge.find("this session has spent $"), std::string::npos) << badge;
  EXPECT_NE(badge.find("GPU util 90%"), std::string::npos) << badge;
  EXPECT_NE(badge.find("memory 29.8 GiB / 80 GiB"), std::string::npos) << badge;
  EXPECT_NE(cell_text(nb, 1).find("price $72.0/GPU-h, budget $0.60"), std::string::npos) << cell_text(nb, 1);
  // The 3 s cell ran whole and its cost line shows ~6 cents.
  const std::string c2 = cell_text(nb, 2);
  EXPECT_FALSE(cell_has_error(nb, 2, "KeyboardInterrupt")) << c2;
  const double c2_usd = dollars(c2, "cell cost");
  EXPECT_GE(c2_usd, 0.059) << c2;
  EXPECT_LE(c2_usd, 0.12) << c2;
  EXPECT_NE(c2.find("util 90%"), std::string::npos) << c2;
  // The loop was interrupted by the budget, with KeyboardInterrupt, as the Interrupt button does.
  const std::string c3 = cell_text(nb, 3);
  EXPECT_TRUE(cell_has_error(nb, 3, "KeyboardInterrupt")) << c3;
  EXPECT_NE(c3.find("the budget stopped this cell"), std::string::npos) << c3;
  // Over budget, a new cell is refused with a message and does not run.
  const std::string c4 = cell_text(nb, 4);
  EXPECT_EQ(c4.find("this cell must not run"), std::string::npos) << c4;
  EXPECT_NE(c4.find("the cell was not run"), std::string::npos) << c4;
  EXPECT_NE(cell_text(nb, 5).find("budget $1.00"), std::string::npos) << cell_text(nb, 5);
  // The kernel survived with its variables.
  EXPECT_NE(cell_text(nb, 6).find("steps True warm"), std::string::npos) << cell_text(nb, 6);
  // The summary: about the budget spent.
  const std::string summary = cell_text(nb, 7);
  const double spent = dollars(summary, "spent          ");
  EXPECT_GE(spent, 0.60) << summary;
  EXPECT_LE(spent, 0.90) << summary;
  EXPECT_NE(summary.find("[stop_budget]"), std::string::npos) << summary;
  const std::string cells = cell_text(nb, 8);
  EXPECT_NE(cells.find("interrupted"), std::string::npos) << cells;
  EXPECT_NE(cells.find("refused"), std::string::npos) << cells;

  // The ledger: one run for the session, labelled kind=notebook, stopped by the budget, with its cells.
  const auto run = notebook_run(e);
  ASSERT_FALSE(run.is_null()) << "no kind=notebook run in the ledger";
  EXPECT_EQ(run["stopped_by"], "budget") << run.dump();
  EXPECT_NE(run["status"], "running") << run.dump();
  EXPECT_GE(run["cost_usd"].get<double>(), 0.60) << run.dump();
  EXPECT_NE(run["command"].get<std::string>().find("ipykernel"), std::string::npos) << run.dump();
  auto rep = test::run_gpumeter({"report", std::to_string(run["run_id"].get<int>()), "--json"}, e);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const auto j = nlohmann::json::parse(rep.out);
  ASSERT_TRUE(j.contains("cells")) << rep.out;
  std::map<std::string, int> statuses;
  double cells_usd = 0;
  for (const auto& c : j["cells"]) {
    ++statuses[c["status"].get<std::string>()];
    cells_usd += c["cost_usd"].get<double>();
    EXPECT_GT(c["start_s"].get<double>(), 0.3) << "cells count from the kernel's start: " << c.dump();
  }
  EXPECT_EQ(statuses["interrupted"], 1) << j["cells"].dump();
  EXPECT_EQ(statuses["refused"], 1) << j["cells"].dump();
  EXPECT_GE(statuses["ok"], 2) << j["cells"].dump();
  EXPECT_LE(cells_usd, j["cost_usd"].get<double>()) << j["cells"].dump();
  double stop_usd = -1;
  for (const auto& a : j["actions"])
    if (a["kind"] == "stop_budget") stop_usd = a["cost_usd"].get<double>();
  EXPECT_GE(stop_usd, 0.60) << j["actions"].dump();
  EXPECT_LE(stop_usd, 0.65) << "stopped within a sample of the budget: " << j["actions"].dump();
}

TEST_F(NotebookIntegrationTest, AnIdleKernelHoldingTheGpuShowsIdleGpusHeldInTheBadgeAndTheSummary) {
  const auto e = env(0);
  const auto nb = execute(
      {"%load_ext gpumeter", "%gpumeter --price 36 --max-idle 2s", "import time\ntime.sleep(5)", "%gpumeter"},
      e);
  const std::string badge = cell_text(nb, 0);
  EXPECT_NE(badge.find("idle_gpus_held"), std::string::npos) << badge;
  EXPECT_NE(badge.find("$36.00/h"), std::string::npos) << badge;
  const std::string summary = cell_text(nb, 3);
  EXPECT_NE(summary.find("idle_gpus_held"), std::string::npos) << summary;
  const auto run = notebook_run(e);
  ASSERT_FALSE(run.is_null());
  auto rep = test::run_gpumeter({"report", std::to_string(run["run_id"].get<int>()), "--json"}, e);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  bool finding = false;
  const auto report = nlohmann::json::parse(rep.out);
  for (const auto& f : report["findings"]) finding = finding || f["kind"] == "idle_gpus_held";
  EXPECT_TRUE(finding) << rep.out;
}

TEST_F(NotebookIntegrationTest, NoBinaryNoNvmlOrACrashedMeterIsOneLineAndTheKernelGoesOn) {
  const std::vector<std::string> cells = {"%load_ext gpumeter", "x = 40 + 2", "print('x is', x)"};
  auto check = [&](const nlohmann::json& nb, const std::string& expected) {
    std::string all;
    for (std::size_t i = 0; i < nb["cells"].size(); ++i) all += cell_text(nb, i);
    EXPECT_NE(all.find(expected), std::string::npos) << all;
    EXPECT_NE(cell_text(nb, 2).find("x is 42"), std::string::npos) << all;
    for (std::size_t i = 1; i < nb["cells"].size(); ++i)
      EXPECT_EQ(cell_text(nb, i).find("ERROR"), std::string::npos) << all;
  };
  auto e = env();
  e["GPUMETER_BIN"] = dir_.path() + "/no-such-gpumeter";
  check(execute(cells, e, "nobin"), "is not an executable file: this notebook is not metered");

  const std::string crash = dir_.write("crash.sh", "#!/bin/sh\necho 'simulated meter crash' >&2\nexit 3\n");
  std::filesystem::permissions(crash, std::filesystem::perms::owner_all);
  e = env();
  e["GPUMETER_BIN"] = crash;
  check(execute(cells, e, "crash"), "stopped unexpectedly (exit 3: simulated meter crash)");

  e = env();
  e["GPUMETER_NVML_LIBRARY"] = dir_.path() + "/no-such-libnvidia-ml.so.1";
  check(execute(cells, e, "nonvml"), "no GPU telemetry");
}

TEST_F(NotebookIntegrationTest, TheBadgeInABrowserOnARealNotebookServer) {
  // A real Jupyter Notebook server on loopback (ephemeral port, token) and headless Chromium running the
  // cells.
  ASSERT_TRUE(std::filesystem::exists("/usr/bin/chromium")) << "chromium is installed by scripts/setup.sh";
  auto probe = test::run_command({kPython, "-c", "import notebook, tornado"});
  ASSERT_EQ(probe.exit_code, 0) << "jupyter-notebook is installed by scripts/setup.sh: " << probe.err;
  nlohmann::json nb = {
      {"nbformat", 4},
      {"nbformat_minor", 5},
      {"metadata",
       {{"kernelspec", {{"name", "python3"}, {"display_name", "Python 3"}, {"language", "python"}}}}},
      {"cells", nlohmann::json::array()}};
  int n = 0;
  for (const std::string src :
       {"%load_ext gpumeter", "%gpumeter --price 36 --budget 5", "import time\ntime.sleep(6)\nx = 42"})
    nb["cells"].push_back({{"cell_type", "code"},
                           {"id", "cell" + std::to_string(n++)},
                           {"metadata", nlohmann::json::object()},
                           {"execution_count", nullptr},
                           {"outputs", nlohmann::json::array()},
                           {"source", src}});
  const std::string work = dir_.path() + "/server";
  std::filesystem::create_directories(work);
  const std::string path = work + "/badge.ipynb";
  std::ofstream(path) << nb.dump(1);
  const std::string png = dir_.path() + "/badge.png";
  auto e = env();
  e["JUPYTER_CONFIG_DIR"] = dir_.path() + "/jupyter-config";
  e["JUPYTER_DATA_DIR"] = dir_.path() + "/jupyter-data";
  auto r =
      test::run_command({kPython, test::source_dir() + "/tests/support/notebook_browser.py", work, path, png},
                        e, std::nullopt, 280);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const std::string badge = j["badge_text"];
  EXPECT_NE(badge.find("this session has spent $"), std::string::npos) << badge;
  EXPECT_NE(badge.find("$36.00/h"), std::string::npos) << badge;
  EXPECT_NE(badge.find("GPU util 90%"), std::string::npos) << badge;
  EXPECT_NE(badge.find("budget $5.00"), std::string::npos) << badge;
  const std::string bytes = test::read_file(png);
  ASSERT_GT(bytes.size(), 1000u) << "screenshot missing or empty";
  ASSERT_EQ(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n"), 0);
  auto be32 = [&](std::size_t p) {
    return (static_cast<unsigned>(static_cast<unsigned char>(bytes[p])) << 24) |
           (static_cast<unsigned>(static_cast<unsigned char>(bytes[p + 1])) << 16) |
           (static_cast<unsigned>(static_cast<unsigned char>(bytes[p + 2])) << 8) |
           static_cast<unsigned>(static_cast<unsigned char>(bytes[p + 3]));
  };
  EXPECT_GT(be32(16), 400u) << "width of the cell";
  EXPECT_GT(be32(20), 20u) << "height of the cell";
  // Kept for a person to look at: build/test-artifacts/screenshots/notebook-badge.png
  const std::filesystem::path keep =
      std::filesystem::path(GPUMETER_BINARY_DIR) / "test-artifacts" / "screenshots";
  std::error_code ec;
  std::filesystem::create_directories(keep, ec);
  std::filesystem::copy_file(png, keep / "notebook-badge.png",
                             std::filesystem::copy_options::overwrite_existing, ec);
}

}  // namespace
}  // namespace gm
