// HTML pages (run, multi-run, trace) rendered in headless Chromium: no console errors, no network
// requests, every chart drew every series (pixel counts written by the page), and a screenshot that is not
// blank and shows the series colours.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "report/html.h"
#include "report/html_page.h"
#include "support/support.h"

namespace gm {
namespace {

const char* kChromium = "/usr/bin/chromium";

struct Rendered {
  std::string dom;
  std::string log;
  std::string status;
};

std::vector<std::string> chromium_args(const std::string& profile) {
  return {kChromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"};
}

Rendered render(const test::TempDir& dir, const std::string& html_path, const std::string& fragment = "") {
  auto args = chromium_args(dir.path() + "/profile-dom");
  args.push_back("--dump-dom");
  args.push_back("file://" + html_path + fragment);
  auto r = test::run_command(args, {}, std::nullopt, 90);
  Rendered out{r.out, r.err, ""};
  std::smatch m;
  static const std::regex re("<pre id=\"gm-status\">([^<]*)</pre>");
  if (std::regex_search(out.dom, m, re)) out.status = m[1];
  return out;
}

/// Minimal PNG reader (8-bit RGB/RGBA, non-interlaced): returns RGBA pixels.
bool read_png(const std::string& bytes, unsigned& w, unsigned& h, std::vector<unsigned char>& rgba) {
  if (bytes.size() < 8 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return false;
  std::size_t pos = 8;
  std::string idat;
  int colour = -1, depth = 0;
  auto be32 = [&](std::size_t p) {
    return (static_cast<unsigned>(static_cast<unsigned char>(bytes[p])) << 24) |
           (static_cast<unsigned>(static_cast<unsigned char>(bytes[p + 1])) << 16) |
           (static_cast<unsigned>(static_cast<unsigned char>(bytes[p + 2])) << 8) |
           static_cast<unsigned>(static_cast<unsigned char>(bytes[p + 3]));
  };
  while (pos + 8 <= bytes.size()) {
    unsigned len = be32(pos);
    std::string type = bytes.substr(pos + 4, 4);
    if (pos + 12 + len > bytes.size()) return false;
    if (type == "IHDR") {
      w = be32(pos + 8);
      h = be32(pos + 12);
      depth = bytes[pos + 16];
      colour = bytes[pos + 17];
      if (bytes[pos + 20] != 0) return false;  // interlaced
    } else if (type == "IDAT") {
      idat += bytes.substr(pos + 8, len);
    }
    pos += 12 + len;
  }
  if (depth != 8 || (colour != 2 && colour != 6)) return false;
  const unsigned bpp = colour == 6 ? 4 : 3;
  const std::size_t stride = static_cast<std::size_t>(w) * bpp;
  std::vector<unsigned char> raw((stride + 1) * h);
  uLongf raw_len = static_cast<uLongf>(raw.size());
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), static_cast<uLong>(idat.size())) != Z_OK)
    return false;
  std::vector<unsigned char> img(stride * h), prev(stride, 0);
  for (unsigned y = 0; y < h; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* src = &raw[y * (stride + 1) + 1];
    unsigned char* dst = &img[y * stride];
    for (std::size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? dst[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
      int v = src[i];
      switch (filter) {
        case 1: v += a; break;
        case 2: v += b; break;
        case 3: v += (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          v += (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default: break;
      }
      dst[i] = static_cast<unsigned char>(v & 0xff);
    }
    std::copy(dst, dst + stride, prev.begin());
  }
  rgba.resize(static_cast<std::size_t>(w) * h * 4);
  for (std::size_t p = 0; p < static_cast<std::size_t>(w) * h; ++p) {
    for (unsigned k = 0; k < 3; ++k) rgba[p * 4 + k] = img[p * bpp + k];
    rgba[p * 4 + 3] = bpp == 4 ? img[p * bpp + 3] : 255;
  }
  return true;
}

/// Parses "chart=ID points=N series=a:123,b:45" lines into chart → series → pixels.
std::map<std::string, std::map<std::string, long>> charts_of(const std::string& status) {
  std::map<std::string, std::map<std::string, long>> out;
  std::istringstream in(status);
  std::string line;
  static const std::regex re("^chart=(\\S+) points=\\d+ series=(.*)$");
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    auto& series = out[m[1]];
    std::string list = m[2];
    std::size_t start = 0;
    while (start < list.size()) {
      std::size_t comma = list.find(',', start);
      std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      std::size_t colon = item.rfind(':');
      series[item.substr(0, colon)] = std::stol(item.substr(colon + 1));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

void expect_clean_render(const test::TempDir& dir, const std::string& html, const std::string& name,
                         const std::map<std::string, std::vector<std::string>>& expected,
                         std::string* status_out = nullptr) {
  const std::string path = dir.write(name, html);
  // The page forbids every network access itself.
  EXPECT_NE(html.find("default-src 'none'"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  auto r = render(dir, path);
  ASSERT_FALSE(r.status.empty()) << "no status element after load; log:\n" << r.log;
  if (status_out != nullptr) *status_out = r.status;
  EXPECT_NE(r.status.find("\ndone"), std::string::npos) << r.status;
  EXPECT_NE(r.status.find("resources=0\n"), std::string::npos) << r.status;
  EXPECT_NE(r.status.find("errors=0\n"), std::string::npos) << r.status;
  // No text label (headings, summary, bar names and values, table cells) overlaps another.
  EXPECT_NE(r.status.find("label_overlaps=0\n"), std::string::npos) << r.status;
  // The header cards ($, rate, waste, energy, CO2, verdict or their trace counterparts).
  EXPECT_TRUE(std::regex_search(r.status, std::regex("\ncards=[4-9]\n"))) << r.status;
  // Console messages (errors, CSP violations of attempted requests) appear in Chromium's log.
  EXPECT_EQ(r.log.find("CONSOLE"), std::string::npos) << r.log;
  EXPECT_EQ(r.log.find("Content Security Policy"), std::string::npos) << r.log;
  auto charts = charts_of(r.status);
  for (const auto& [chart, series] : expected) {
    ASSERT_TRUE(charts.count(chart)) << "chart " << chart << " missing:\n" << r.status;
    for (const auto& s : series) {
      ASSERT_TRUE(charts[chart].count(s)) << chart << "/" << s << "\n" << r.status;
      EXPECT_GT(charts[chart][s], 20) << chart << "/" << s << " drew no pixels\n" << r.status;
    }
  }
  // Screenshot: not blank, and the first series colour (#1f77b4) is on screen.
  auto args = chromium_args(dir.path() + "/profile-shot");
  const std::string png = dir.path() + "/" + name + ".png";
  args.push_back("--screenshot=" + png);
  args.push_back("--window-size=1000,2000");
  args.push_back("file://" + path);
  auto shot = test::run_command(args, {}, std::nullopt, 90);
  unsigned w = 0, h = 0;
  std::vector<unsigned char> px;
  ASSERT_TRUE(read_png(test::read_file(png), w, h, px)) << shot.err;
  EXPECT_EQ(w, 1000u);
  std::size_t non_white = 0, blue = 0;
  for (std::size_t i = 0; i + 3 < px.size(); i += 4) {
    if (px[i] < 240 || px[i + 1] < 240 || px[i + 2] < 240) ++non_white;
    if (std::abs(px[i] - 0x1f) <= 6 && std::abs(px[i + 1] - 0x77) <= 6 && std::abs(px[i + 2] - 0xb4) <= 6) ++blue;
  }
  EXPECT_GT(non_white, static_cast<std::size_t>(w) * h / 100) << name;
  EXPECT_GT(blue, 100u) << name;
  // Kept for a person to look at: build/test-artifacts/screenshots/<page>.png
  const std::filesystem::path keep =
      std::filesystem::path(GPUMETER_BINARY_DIR) / "test-artifacts" / "screenshots";
  std::error_code ec;
  std::filesystem::create_directories(keep, ec);
  std::filesystem::copy_file(png, keep / (name + ".png"), std::filesystem::copy_options::overwrite_existing,
                             ec);
  EXPECT_FALSE(ec) << "cannot keep the screenshot " << png << " in " << keep << ": " << ec.message();
}

class ReportHtmlIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kChromium)) << "chromium missing (scripts/setup.sh installs it)";
  }
};

report::RunHtmlInput sample_run() {
  report::RunHtmlInput in;
  store::RunRecord& r = in.run;
  r.id = 7;
  r.command = "python train.py";
  r.user = "ana";
  r.host = "node1";
  r.status = store::RunStatus::finished;
  r.price_micros_per_gpu_hour = 3'600'000'000;
  r.price_source = "--price";
  r.gpus_allocated = {"GPU-a", "GPU-b"};
  r.gpus_used = {"GPU-a"};
  r.gpu_model = "H100 SXM 80GB";
  r.budget_micros = 150 * util::kMicrosPerUsd;
  r.total_steps = 200;
  r.wall_ms = 60'000;
  r.billed_s = 60;
  r.cost_micros = 120'000'000;
  r.idle_cost_micros = 12'000'000;
  r.unused_gpu_cost_micros = 60'000'000;
  r.energy_j = 30'000;
  r.energy_method = store::RunEnergyMethod::counter;
  r.forecast_cost_usd = 400;
  for (int t = 1; t <= 60; ++t)
    for (unsigned g = 0; g < 2; ++g) {
      store::SampleRecord s;
      s.run_id = 7;
      s.t_ms = t * 1000;
      s.gpu_index = g;
      s.utilization_pct = g == 0 ? 50.0 + 40.0 * std::sin(t / 5.0) : 0.0;
      s.memory_used_bytes = g == 0 ? static_cast<std::uint64_t>(t) << 30 : 0;
      s.power_w = g == 0 ? 300.0 + 5 * t : 70.0;
      s.cost_micros = 1'000'000;
      s.job_present = g == 0;
      in.samples.push_back(s);
    }
  for (int i = 1; i <= 12; ++i) {
    store::ProgressRecord p;
    p.run_id = 7;
    p.t_ms = i * 5000 + (i % 3 == 1 ? 900 : i % 3 == 2 ? 300 : 0);  // uneven steps: a forecast band
    p.step = i * 5;
    p.tokens = i * 5000;
    p.metrics = {{"loss", 3.0 / i}, {"acc", 0.05 * i}};
    p.cost_micros = i * 10'000'000 - (i % 3) * 1'000'000;
    in.progress.push_back(p);
  }
  store::ActionRecord a;
  a.t_ms = 30'000;
  a.kind = store::ActionKind::warn;
  a.cost_micros = 60'000'000;
  a.message = "spent 40% of the budget <&>";
  in.actions.push_back(a);
  in.kpis = report::compute_kpis(in.run, in.progress, nullptr, {});
  in.rightsizing_hint = "peak 12 GiB fits an L4 24GB";
  return in;
}

TEST_F(ReportHtmlIntegrationTest, RunPageRendersEveryChart) {
  test::TempDir dir;
  auto html = report::render_run_html(sample_run());
  ASSERT_TRUE(html.ok()) << html.error().message;
  std::string status;
  expect_clean_render(
      dir, *html, "run.html",
      {{"cost", {"cost_usd", "budget_usd", "forecast_usd", "forecast_low_usd", "forecast_high_usd"}},
       {"util", {"gpu0", "gpu1"}},
       {"memory", {"gpu0"}},
       {"power", {"gpu0", "gpu1"}},
       {"progress", {"step"}},
       {"metric-loss", {"loss"}},
       {"metric-acc", {"acc"}},
       {"step-cost", {"usd_per_step"}},
       {"waste", {"cost_usd"}}},
      &status);
  // The warning at 30 s and steps 10, 20, ... 60 are marked on the cost, utilization, memory and power
  // charts, and a caption names them.
  for (const char* chart : {"cost", "util", "memory", "power"})
    EXPECT_NE(status.find(std::string("marks=") + chart + ":7\n"), std::string::npos) << chart << "\n"
                                                                                      << status;
  EXPECT_NE(html->find("red dashed lines: warn at 30.0 s; grey dotted lines: every 10 steps"),
            std::string::npos);
}

TEST_F(ReportHtmlIntegrationTest, RunPageOfARealTorchTrainingRunFromItsLedger) {
  // A real PyTorch training loop (Debian's python3-torch) with a real tqdm bar and the Python client's loss,
  // metered on a fake-NVML H100 whose process is python3; the page is made from the ledger by the binary.
  ASSERT_TRUE(std::filesystem::exists(test::fake_nvml_library())) << "fake NVML library not built";
  auto probe = test::run_command({"/usr/bin/python3", "-c", "import torch, tqdm"});
  ASSERT_EQ(probe.exit_code, 0) << "python3-torch and python3-tqdm are installed by scripts/setup.sh: "
                                << probe.err;
  test::TempDir dir;
  const std::string job = dir.write(
      "train.py",
      "import time, torch, tqdm, gpumeter\n"
      "torch.manual_seed(0)\n"
      "model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))\n"
      "opt = torch.optim.SGD(model.parameters(), lr=0.05)\n"
      "x = torch.randn(512, 32); y = x[:, :1] * 2 + 1\n"
      "for step in tqdm.tqdm(range(1, 61), desc='train'):\n"
      "    loss = torch.nn.functional.mse_loss(model(x), y)\n"
      "    opt.zero_grad(); loss.backward(); opt.step()\n"
      "    gpumeter.progress(step=step, total_steps=60, metrics={'loss': loss.item()})\n"
      "    time.sleep(0.06)\n");
  auto env = test::fake_env(dir.write("scenario.json", test::one_gpu_scenario("python3", 90)), dir.path());
  env["PYTHONPATH"] = test::source_dir() + "/python";
  env["OMP_NUM_THREADS"] = "1";
  auto run = test::run_gpumeter(
      {"run", "--price", "36", "--budget", "1", "--warn-at", "1%", "--quiet", "/usr/bin/python3", job}, env,
      std::nullopt, 120);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const std::string out = dir.path() + "/torch-run.html";
  auto page = test::run_gpumeter({"report", "last", "--html", out}, env);
  ASSERT_EQ(page.exit_code, 0) << page.err;
  const std::string html = test::read_file(out);
  std::string status;
  expect_clean_render(dir, html, "run-torch.html",
                      {{"cost", {"cost_usd", "budget_usd"}},
                       {"util", {"gpu0"}},
                       {"power", {"gpu0"}},
                       {"progress", {"step"}},
                       {"metric-loss", {"loss"}}},
                      &status);
  // The 1 % warning and round steps are marked on the cost chart.
  EXPECT_TRUE(std::regex_search(status, std::regex("\nmarks=cost:([2-9]|1[0-9])\n"))) << status;
  EXPECT_NE(html.find("red dashed lines: warn at"), std::string::npos);

  // The multi-run page of the same ledger.
  const std::string multi = dir.path() + "/torch-multi.html";
  auto fleet = test::run_gpumeter({"report", "--since", "1d", "--by", "user", "--html", multi}, env);
  ASSERT_EQ(fleet.exit_code, 0) << fleet.err;
  expect_clean_render(dir, test::read_file(multi), "multi-torch.html",
                      {{"cost-by-group", {"cost_usd"}}, {"waste", {"cost_usd"}}});
}

TEST_F(ReportHtmlIntegrationTest, MultiRunPageRendersEveryChart) {
  report::MultiReport rep;
  rep.by.kind = report::GroupBy::Kind::day;
  for (int d = 0; d < 5; ++d) {
    report::GroupTotals g;
    g.key = report::format_date_utc((20'000LL + d) * 86'400'000);
    g.runs = d + 1;
    g.cost_micros = (d + 1) * 10'000'000;
    g.idle_cost_micros = (d + 1) * 1'000'000;
    g.unused_gpu_cost_micros = 500'000;
    rep.total.runs += g.runs;
    rep.total.cost_micros += g.cost_micros;
    rep.total.idle_cost_micros += g.idle_cost_micros;
    rep.total.unused_gpu_cost_micros += g.unused_gpu_cost_micros;
    rep.groups.push_back(g);
  }
  for (int h = 0; h < 48; ++h) {
    if (h >= 20 && h < 24) continue;  // a gap without runs
    report::TimelineBucket b;
    b.start_unix_ms = 20'000LL * 86'400'000 + h * 3'600'000LL;
    b.cost_micros = (5 + h % 7) * 1'000'000;
    b.util_samples = 3600;
    b.util_sum_pct = 3600.0 * (30 + h % 50);
    rep.timeline.push_back(b);
  }
  rep.top_runs.push_back(report::TopRun{3, "python </script><b>x</b>", "ana", "H100", 2, 0, 10, 5'000'000, 0,
                                        store::RunStatus::succeeded, std::nullopt, "succeeded"});
  auto html = report::render_multi_html(rep);
  ASSERT_TRUE(html.ok()) << html.error().message;
  test::TempDir dir;
  expect_clean_render(dir, *html, "multi.html",
                      {{"cost-per-day", {"cost_usd", "waste_usd"}},
                       {"timeline-cost", {"cost_usd"}},
                       {"timeline-util", {"util_pct"}},
                       {"cost-by-group", {"cost_usd"}},
                       {"waste-by-group", {"waste_usd"}},
                       {"waste", {"cost_usd"}}});
}

TEST_F(ReportHtmlIntegrationTest, TracePageFromTypedAnalysesDrawsEveryChart) {
  trace::FileAnalysis f;
  f.file = "/data/run/rank0.json";
  f.rank = 0;
  f.format = "kineto_json";
  trace::DeviceAnalysis d;
  d.device = "0";
  d.window_ns = 3'000'000;
  d.busy_ns = 2'400'000;
  d.idle_ns = 600'000;
  d.compute_ns = 1'800'000;
  d.communication_ns = 450'000;
  d.memory_ns = 150'000;
  d.kernels = {{"ampere_sgemm_128x64_nn", "compute", 30, 1'500'000, 1'350'000, 0},
               {"ncclDevKernel_AllReduce_Sum_f32(ncclDevComm*, unsigned long, ncclWork*)", "communication", 6,
                600'000, 450'000, 0}};
  d.operators = {{"aten::mm", "", 30, 1'500'000, 1'350'000, 0}, {"aten::add_", "", 10, 100'000, 90'000, 0}};
  for (int s = 0; s < 3; ++s)
    d.step_split.push_back({"ProfilerStep#" + std::to_string(s + 1), s * 1'000'000LL, 1'000'000, 600'000,
                            150'000, 50'000, 200'000});
  trace::StepTimeline tl;
  tl.step = "ProfilerStep#2";
  tl.start_ns = 1'000'000;
  tl.step_ns = 1'000'000;
  tl.streams = {"7", "13"};
  tl.names = {"ampere_sgemm_128x64_nn", "ncclDevKernel_AllReduce_Sum_f32", "Memcpy HtoD (Pinned -> Device)"};
  tl.spans = {{0, 0, 0, 600'000, "compute"},
              {1, 1, 400'000, 300'000, "communication"},
              {0, 2, 700'000, 100'000, "memory"}};
  d.timeline = tl;
  f.devices.push_back(d);
  trace::FileAnalysis skipped;
  skipped.file = "/data/run/notes.json";
  skipped.skipped = "a JSON document that is not a trace";
  auto html = report::render_trace_html({f, skipped}, report::TraceHtmlOptions{3.6, "--price"});
  ASSERT_TRUE(html.ok()) << html.error().message;
  EXPECT_NE(html->find("rank0.json · rank 0 · device 0"), std::string::npos);
  EXPECT_NE(html->find("notes.json: skipped: a JSON document that is not a trace"), std::string::npos);
  test::TempDir dir;
  expect_clean_render(dir, *html, "trace.html",
                      {{"split-0", {"ms"}},
                       {"steps-0", {"compute", "communication", "memory", "idle"}},
                       {"timeline-0", {"compute", "communication", "memory"}},
                       {"kernels-0", {"ms"}},
                       {"operators-0", {"ms"}}});
  // Without a price the page says so and shows time.
  auto unpriced = report::render_trace_html({f}, report::TraceHtmlOptions{});
  ASSERT_TRUE(unpriced.ok());
  EXPECT_NE(unpriced->find("figures in time only"), std::string::npos);
}

TEST_F(ReportHtmlIntegrationTest, TraceHtmlFromTheBinaryOnASampleTrace) {
  const std::string trace =
      test::sample_traces_dir() + "/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz";
  test::TempDir dir;
  const std::string out = dir.path() + "/trace.html";
  auto r = test::run_gpumeter({"trace", trace, "--price", "3", "--html", out, "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string page = test::read_file(out);
  ASSERT_FALSE(page.empty());
  expect_clean_render(dir, page, "trace-sample.html",
                      {{"split-0", {"ms"}}, {"kernels-0", {"ms"}}, {"operators-0", {"ms"}}});
}

TEST_F(ReportHtmlIntegrationTest, TraceHtmlOfTheResNet50SampleShowsStepsStreamsAndTheInputBoundFinding) {
  // A real PyTorch profiler trace (ResNet-50, DataLoader num_workers=0): 5 profiler steps, kernels on one
  // stream and host-to-device copies, 38 % of the window waiting on the host.
  const std::string trace = test::sample_traces_dir() + "/kineto_tb_plugin_samples/resnet50_num_workers_0";
  test::TempDir dir;
  const std::string out = dir.path() + "/resnet.html";
  auto r = test::run_gpumeter({"trace", trace, "--price", "3", "--html", out, "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string page = test::read_file(out);
  EXPECT_NE(page.find("input_bound"), std::string::npos);
  EXPECT_NE(page.find("Streams during ProfilerStep#"), std::string::npos);
  expect_clean_render(dir, page, "trace-resnet50.html",
                      {{"split-0", {"ms"}},
                       {"steps-0", {"compute", "memory", "idle"}},
                       {"timeline-0", {"compute", "memory"}},
                       {"kernels-0", {"ms"}}});
}

TEST_F(ReportHtmlIntegrationTest, TraceHtmlOfAFolderOfRanksShowsTheJobAndItsStragglerCost) {
  // Four ranks made from the real NCCL trace by bench/make_skewed_ranks.py, rank 3 late by 300 µs.
  test::TempDir dir;
  const std::string folder = dir.path() + "/job";
  auto made =
      test::run_command({"/usr/bin/python3", test::source_dir() + "/bench/make_skewed_ranks.py", "--source",
                         test::sample_traces_dir() + "/nccl_parser_config/nccl_data.json.gz", "--copies", "1",
                         "--ranks", "4", "--skew-us", "300", "--out", folder},
                        {}, std::nullopt, 120);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string out = dir.path() + "/job.html";
  auto r = test::run_gpumeter({"trace", folder, "--price", "3", "--html", out, "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string page = test::read_file(out);
  ASSERT_FALSE(page.empty());
  EXPECT_NE(page.find("Job " + folder + ": ranks"), std::string::npos);
  EXPECT_NE(page.find("straggler wait 18.900 ms of GPU time"),
            std::string::npos);  // 21 collectives × 3 ranks × 300 µs
  expect_clean_render(
      dir, page, "trace-job.html",
      {{"job-0", {"ms"}}, {"job-0-steps", {"ms"}}, {"split-0", {"ms"}}, {"timeline-0", {"communication"}}});
}

TEST_F(ReportHtmlIntegrationTest, TraceDiffPageFromTheBinaryShowsTheVerdictAndWhatFailed) {
  const std::string root = test::sample_traces_dir() + "/kineto_tb_plugin_samples/";
  const std::string base = root + "resnet50_num_workers_0", now = root + "resnet50_num_workers_4";
  test::TempDir dir;
  const std::string pass_page = dir.path() + "/diff-pass.html";
  auto pass = test::run_gpumeter({"trace", "diff", base, now, "--price", "3", "--html", pass_page});
  ASSERT_EQ(pass.exit_code, 0) << pass.err;
  const std::string page = test::read_file(pass_page);
  EXPECT_NE(page.find("gpumeter trace diff: PASS"), std::string::npos);
  expect_clean_render(dir, page, "trace-diff-pass.html",
                      {{"classes-base", {"base"}}, {"classes-new", {"new"}}});

  // A 1 % gate fails on the split-K GEMM whose time per step grew by 3.6 ms: the page says FAIL and names it.
  const std::string fail_page = dir.path() + "/diff-fail.html";
  auto fail = test::run_gpumeter(
      {"trace", "diff", base, now, "--price", "3", "--max-cost-increase", "1%", "--html", fail_page});
  ASSERT_EQ(fail.exit_code, 1) << fail.err << fail.out;
  const std::string failed = test::read_file(fail_page);
  EXPECT_NE(failed.find("gpumeter trace diff: FAIL"), std::string::npos);
  EXPECT_NE(failed.find("FAIL: "), std::string::npos);
  EXPECT_NE(failed.find("volta_scudnn_128x128_stridedB_splitK_medium_nn_v1"), std::string::npos);

  auto bad = test::run_gpumeter({"trace", "diff", base, now, "--html", dir.path() + "/no/such/dir/x.html"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("x.html"), std::string::npos) << bad.err;
}

TEST_F(ReportHtmlIntegrationTest, TheChecksCatchANetworkRequestAndABrokenChart) {
  auto html = report::render_run_html(sample_run());
  ASSERT_TRUE(html.ok());
  std::string page = *html;
  // An image from the network and a chart series without data: the CSP must block the request (logged by
  // Chromium) and the status must show the empty series drew nothing.
  page.replace(page.find("<div id=\"gm-root\">"), 0, "<img src=\"http://127.0.0.1:9/x.png\">");
  const std::string key = "\"label\":\"budget_usd\",\"values\":[";
  const std::size_t at = page.find(key);
  ASSERT_NE(at, std::string::npos);
  const std::size_t end = page.find(']', at + key.size());
  page.replace(at + key.size(), end - at - key.size(), "");
  test::TempDir dir;
  auto r = render(dir, dir.write("bad.html", page));
  EXPECT_NE(r.log.find("Content Security Policy"), std::string::npos) << r.log;
  auto charts = charts_of(r.status);
  ASSERT_TRUE(charts.count("cost")) << r.status;
  EXPECT_EQ(charts["cost"]["budget_usd"], 0) << r.status;
  EXPECT_GT(charts["cost"]["cost_usd"], 20) << r.status;
  EXPECT_NE(r.status.find("label_overlaps=0\n"), std::string::npos) << r.status;

  // Summary terms pulled over their values: the label check counts the collisions.
  std::string overlapping = *html;
  overlapping.replace(overlapping.find("</style>"), 0, "dl.summary dd { margin-left: -200px; }");
  auto o = render(dir, dir.write("overlap.html", overlapping));
  EXPECT_EQ(o.status.find("label_overlaps=0\n"), std::string::npos) << o.status;
  EXPECT_NE(o.status.find("label_overlaps="), std::string::npos) << o.status;
}

// Tables sort by a column when its heading is clicked (the page's #selftest hook clicks the first numeric
// column and checks the order).
TEST_F(ReportHtmlIntegrationTest, TablesSortByAColumnWhenItsHeadingIsClicked) {
  nlohmann::json spec;
  spec["title"] = "sort";
  spec["tables"] = nlohmann::json::array(
      {{{"title", "runs"},
        {"header", {"name", "cost"}},
        {"rows", nlohmann::json::array(
                     {nlohmann::json::array({"a", "$0.50"}), nlohmann::json::array({"b", "$12.00"}),
                      nlohmann::json::array({"c", "$3.25"}), nlohmann::json::array({"d", "$1,200.00"})})}}});
  auto page = report::html::page(spec);
  ASSERT_TRUE(page.ok());
  test::TempDir dir;
  auto r = render(dir, dir.write("sort.html", *page), "#selftest");
  EXPECT_NE(r.status.find("sortable_columns=2\n"), std::string::npos) << r.status << r.log;
  EXPECT_NE(r.status.find("sort_check=ok\n"), std::string::npos) << r.status;
  // Descending by cost: d, b, c, a.
  const auto d = r.dom.find("<td>d</td>"), b = r.dom.find("<td>b</td>"), c = r.dom.find("<td>c</td>"),
             a = r.dom.find("<td>a</td>");
  EXPECT_LT(d, b);
  EXPECT_LT(b, c);
  EXPECT_LT(c, a);
}

}  // namespace
}  // namespace gm
