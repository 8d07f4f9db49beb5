// The progress matrix (issue 26): training-loop layouts printed by real tqdm (python3-tqdm), rich.progress
// (python3-rich) and Keras-style, Hugging Face Trainer and Lightning lines (tests/progress/layouts.py), each
// run under the real `gpumeter run` on a fake-NVML H100 at $1/s, several at a time
// (tests/progress/run_matrix.py). Every layout must end at 100 % of its work, show a step never past its
// total and never going back unannounced, and at a quarter to a half of its work forecast the final cost
// within 10 % with an interval that contains it. The burst layouts (issue 35: progress in asynchronous
// bursts, a stand-in GPU that the CPU runs ahead of) must forecast within 10 % at 25-60 % of their work with
// an ETA within 25 % of the time really left.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "support/support.h"

namespace gm {
namespace {

using test::TempDir;

constexpr const char* kPython = "/usr/bin/python3";

double money(std::string v) {
  v.erase(std::remove(v.begin(), v.end(), ','), v.end());
  return std::stod(v);
}

/// One `gpumeter ... · step S[/T] [(note)] [· forecast $F [$L–$H]]` status line.
struct StatusLine {
  std::int64_t step = 0;
  std::optional<std::int64_t> total;
  std::string note;
  std::optional<double> forecast, low, high;
  std::optional<double> eta_s;  ///< " · ETA 5.5s" (seconds under a minute, else "1m 05s")
  double elapsed_s = 0;
  std::string text;
};

std::vector<StatusLine> status_lines(const std::string& err) {
  static const std::regex step_re(R"( · step (\d+)(?:/(\d+))?(?: \(([^)]*)\))?)");
  static const std::regex forecast_re(R"( · forecast \$([0-9.,]+) \[\$([0-9.,]+)–\$([0-9.,]+)\])");
  static const std::regex eta_re(R"( · ETA (?:(\d+)m )?([0-9.]+)s)");
  static const std::regex elapsed_re(R"(^gpumeter (?:(\d+)m )?([0-9.]+)s)");
  std::vector<StatusLine> out;
  std::size_t start = 0;
  while (start < err.size()) {
    std::size_t end = err.find('\n', start);
    if (end == std::string::npos) end = err.size();
    const std::string line = err.substr(start, end - start);
    start = end + 1;
    std::smatch m;
    if (line.rfind("gpumeter ", 0) != 0 || !std::regex_search(line, m, step_re)) continue;
    StatusLine s;
    s.text = line;
    s.step = std::stoll(m[1]);
    if (m[2].matched) s.total = std::stoll(m[2]);
    if (m[3].matched) s.note = m[3];
    if (std::regex_search(line, m, forecast_re)) {
      s.forecast = money(m[1]);
      s.low = money(m[2]);
      s.high = money(m[3]);
    }
    if (std::regex_search(line, m, eta_re))
      s.eta_s = (m[1].matched ? 60 * std::stod(m[1]) : 0.0) + std::stod(m[2]);
    if (std::regex_search(line, m, elapsed_re))
      s.elapsed_s = (m[1].matched ? 60 * std::stod(m[1]) : 0.0) + std::stod(m[2]);
    out.push_back(std::move(s));
  }
  return out;
}

class ProgressMatrixIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test::fake_nvml_library())) << "fake NVML library not built";
    auto probe = test::run_command({kPython, "-c", "import tqdm, rich.progress"});
    ASSERT_EQ(probe.exit_code, 0) << "python3-tqdm and python3-rich are installed by scripts/setup.sh: "
                                  << probe.err;
  }
  std::map<std::string, std::string> env() {
    auto e = test::fake_env(dir_.write("scenario.json", test::one_gpu_scenario("python3", 90)), dir_.path());
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    return e;
  }
  /// Runs the named layouts (all when empty), `jobs` at a time; returns run_matrix.py's index.
  nlohmann::json run_layouts(const std::vector<std::string>& names, int jobs) {
    std::vector<std::string> argv = {kPython, test::source_dir() + "/tests/progress/run_matrix.py",
                                     test::gpumeter_binary(), dir_.path(), std::to_string(jobs)};
    argv.insert(argv.end(), names.begin(), names.end());
    auto r = test::run_command(argv, env(), std::nullopt, 400);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return nlohmann::json::parse(test::read_file(dir_.path() + "/index.json"));
  }
  std::string file(const std::string& name) { return test::read_file(dir_.path() + "/" + name); }
  TempDir dir_;
};

TEST_F(ProgressMatrixIntegrationTest,
       EveryLayoutEndsAtItsWorkWithAForecastWithinTenPercentAtAQuarterToAHalf) {
  const nlohmann::json index = run_layouts({"!burst_*"}, 6);
  ASSERT_GE(index.size(), 20u) << "at least 20 layouts";
  for (const auto& layout : index) {
    const std::string name = layout["name"];
    SCOPED_TRACE(name);
    const std::string err = file(name + ".err");
    ASSERT_EQ(layout["exit_code"], 0) << err;
    const auto report = nlohmann::json::parse(file(name + ".json"));
    EXPECT_EQ(report["steps"], layout["total"]) << "the run ends at 100 % of its work";
    EXPECT_EQ(report["total_steps"], layout["total"]);
    const double final_usd = report["wall_s"].get<double>();  // $1/s before billing rounds up

    const auto lines = status_lines(err);
    ASSERT_FALSE(lines.empty()) << err;
    std::optional<StatusLine> at_quarter_to_half;
    std::int64_t last_step = -1;
    for (const auto& s : lines) {
      if (s.total) {
        EXPECT_LE(s.step, *s.total) << s.text;
      }
      if (s.note.find("revised") == std::string::npos) {
        EXPECT_GE(s.step, last_step) << "no step back unannounced: " << s.text;
      }
      last_step = s.step;
      if (s.forecast) {
        const std::string spent_at = " · $";
        const double spent = money(s.text.substr(s.text.find(spent_at) + spent_at.size()));
        EXPECT_GE(*s.low + 0.005, spent) << "never below the spend: " << s.text;
      }
      // The last forecast made between a quarter and a half of the work.
      if (s.total && s.forecast && s.step * 4 >= *s.total && s.step * 2 <= *s.total) at_quarter_to_half = s;
    }
    ASSERT_TRUE(at_quarter_to_half) << "a forecast at 25-50 % of the work:\n" << err;
    EXPECT_NEAR(*at_quarter_to_half->forecast, final_usd, 0.10 * final_usd) << at_quarter_to_half->text;
    // The status line shows cents: the interval contains the final cost to the display's rounding.
    EXPECT_LE(*at_quarter_to_half->low - 0.005, final_usd) << at_quarter_to_half->text;
    EXPECT_GE(*at_quarter_to_half->high + 0.005, final_usd) << at_quarter_to_half->text;
  }
}

TEST_F(ProgressMatrixIntegrationTest,
       BurstLayoutsCountEveryStepAndForecastWithinTenPercentWithAnEtaWithinAQuarterOfTheTimeLeft) {
  // A synchronisation every 3 to 200 steps, launches from a tenth of the GPU time to nine tenths, progress
  // through the client, a tqdm bar and log lines, a pace that changes after a third of the steps.
  const nlohmann::json index = run_layouts({"burst_*"}, 4);
  ASSERT_GE(index.size(), 8u) << "the burst layouts";
  for (const auto& layout : index) {
    const std::string name = layout["name"];
    SCOPED_TRACE(name);
    const std::string err = file(name + ".err");
    ASSERT_EQ(layout["exit_code"], 0) << err;
    const auto report = nlohmann::json::parse(file(name + ".json"));
    EXPECT_EQ(report["steps"], layout["total"]) << "100 % of the steps counted";
    EXPECT_EQ(report["total_steps"], layout["total"]);
    const double final_usd = report["wall_s"].get<double>();  // $1/s before billing rounds up
    // A quarter of the work, or for a pace that changes mid-run, once the window holds the new pace.
    const double from = layout["check_from"].get<double>();
    std::vector<StatusLine> checked;
    for (const auto& s : status_lines(err)) {
      ASSERT_TRUE(s.total) << s.text;
      const double done = static_cast<double>(s.step) / static_cast<double>(*s.total);
      if (s.forecast && done >= from && done <= 0.6) checked.push_back(s);
    }
    ASSERT_FALSE(checked.empty()) << "a forecast at " << 100 * from << "-60 % of the work:\n" << err;
    for (const auto& s : checked) {
      EXPECT_NEAR(*s.forecast, final_usd, 0.10 * final_usd) << s.text;
      EXPECT_LE(*s.low - 0.005, final_usd) << "the interval contains the final cost: " << s.text;
      EXPECT_GE(*s.high + 0.005, final_usd) << "the interval contains the final cost: " << s.text;
      ASSERT_TRUE(s.eta_s) << s.text;
      const double left_s = report["wall_s"].get<double>() - s.elapsed_s;
      EXPECT_NEAR(*s.eta_s, left_s, 0.25 * left_s) << s.text;
    }
  }
}

TEST_F(ProgressMatrixIntegrationTest, TheIssueLayoutReportsOneHundredEightyOfOneHundredEightySteps) {
  // for ep in trange(3, desc="epoch"): for i in tqdm(range(60), desc=f"epoch {ep}", leave=False): ...
  const std::string layouts = test::source_dir() + "/tests/progress/layouts.py";
  auto r = test::run_gpumeter(
      {"run", "--price", "3600", "--status-every", "1s", kPython, layouts, "issue_epoch_in_inner_desc"},
      env(), std::nullopt, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(steps +180 / 180\n)"))) << r.err;
  for (const auto& s : status_lines(r.err)) {
    ASSERT_TRUE(s.total) << s.text;
    EXPECT_EQ(*s.total, 180) << s.text;
  }
}

TEST_F(ProgressMatrixIntegrationTest, AnUnknownTotalIsSaidAndNoForecastIsMadeUp) {
  // tqdm over a generator without --total-steps: "train: 45it [00:01, 30.00it/s]".
  const std::string layouts = test::source_dir() + "/tests/progress/layouts.py";
  auto r = test::run_gpumeter({"run", "--price", "3600", "--quiet", "--status-every", "1s", "--json-report",
                               dir_.path() + "/r.json", kPython, layouts, "unknown_total"},
                              env(), std::nullopt, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = status_lines(r.err);
  ASSERT_FALSE(lines.empty()) << r.err;
  for (const auto& s : lines) {
    EXPECT_FALSE(s.total) << s.text;
    EXPECT_EQ(s.note, "total unknown") << s.text;
    EXPECT_EQ(s.text.find("forecast"), std::string::npos) << s.text;
  }
  const auto report = nlohmann::json::parse(file("r.json"));
  EXPECT_EQ(report["steps"], 180);
  EXPECT_TRUE(report["total_steps"].is_null());
}

}  // namespace
}  // namespace gm
