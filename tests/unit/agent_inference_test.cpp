// Serving engines' metrics: the exposition parser, the engine readers (on stand-in expositions written from
// the engines' own metric definitions, since the engines themselves need a GPU), counter resets, the cost
// split, and the collector's cost join against a loopback HTTP server.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "agent/agent.h"
#include "serving/serving.h"
#include "support/fakes.h"
#include "support/support.h"

namespace gm::agent {
namespace {

namespace fs = std::filesystem;
using namespace gm::serving;

// ---- stand-in expositions, from the engines' metric definitions (docs/inference.md cites versions) ----

// vLLM V1 (vllm/v1/metrics/loggers.py): labels model_name and engine (the data-parallel engine index);
// request_success also has finished_reason. prometheus_client adds *_created gauges next to counters.
std::string vllm_text(const std::string& model, double prompt, double gen, double requests, double cached) {
  std::string m = "model_name=\"" + model + "\"";
  auto fmt2 = [](double v) {
    std::ostringstream o;
    o.precision(17);
    o << v;
    return o.str();
  };
  return "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
         "# TYPE process_start_time_seconds gauge\n"
         "process_start_time_seconds 1.76e+09\n"
         "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
         "# TYPE vllm:num_requests_running gauge\n"
         "vllm:num_requests_running{" +
         m +
         ",engine=\"0\"} 3.0\n"
         "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"
         "# TYPE vllm:prefix_cache_hits_total counter\n"
         "vllm:prefix_cache_hits_total{" +
         m + ",engine=\"0\"} " + fmt2(cached) +
         "\n"
         "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
         "# TYPE vllm:prompt_tokens_total counter\n"
         "vllm:prompt_tokens_total{" +
         m + ",engine=\"0\"} " + fmt2(prompt * 0.75) +
         "\n"
         "vllm:prompt_tokens_total{" +
         m + ",engine=\"1\"} " + fmt2(prompt * 0.25) +
         "\n"
         "# HELP vllm:prompt_tokens_created Number of prefill tokens processed.\n"
         "# TYPE vllm:prompt_tokens_created gauge\n"
         "vllm:prompt_tokens_created{" +
         m +
         ",engine=\"0\"} 1.7600000012e+09\n"
         "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
         "# TYPE vllm:generation_tokens_total counter\n"
         "vllm:generation_tokens_total{" +
         m + ",engine=\"0\"} " + fmt2(gen) +
         "\n"
         "# HELP vllm:request_success_total Count of successfully processed requests.\n"
         "# TYPE vllm:request_success_total counter\n"
         "vllm:request_success_total{" +
         m + ",engine=\"0\",finished_reason=\"stop\"} " + fmt2(requests - 1 > 0 ? requests - 1 : 0) +
         "\n"
         "vllm:request_success_total{" +
         m + ",engine=\"0\",finished_reason=\"length\"} " + fmt2(requests - 1 > 0 ? 1 : requests) +
         "\n"
         "vllm:request_success_total{" +
         m +
         ",engine=\"0\",finished_reason=\"abort\"} 0.0\n"
         "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.\n"
         "# TYPE vllm:e2e_request_latency_seconds histogram\n"
         "vllm:e2e_request_latency_seconds_sum{" +
         m +
         ",engine=\"0\"} 12.5\n"
         "vllm:e2e_request_latency_seconds_bucket{" +
         m +
         ",engine=\"0\",le=\"0.3\"} 1.0\n"
         "vllm:e2e_request_latency_seconds_bucket{" +
         m + ",engine=\"0\",le=\"+Inf\"} " + fmt2(requests) +
         "\n"
         "vllm:e2e_request_latency_seconds_count{" +
         m + ",engine=\"0\"} " + fmt2(requests) + "\n";
}

// SGLang (python/sglang/srt/metrics/collector.py, TokenizerMetricsCollector): label model_name; newer
// versions label cached tokens by cache_source.
const char* kSglang = R"(# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 7.557572e+06
# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct",cache_source="device"} 1000.0
sglang:cached_tokens_total{model_name="Qwen/Qwen2.5-7B-Instruct",cache_source="host"} 24.0
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="Qwen/Qwen2.5-7B-Instruct"} 4500.0
# HELP sglang:cache_hit_rate The cache hit rate
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="Qwen/Qwen2.5-7B-Instruct"} 0.007507552643049313
)";

// Hugging Face TGI (router, metrics-exporter-prometheus): no model label; token counts are histograms.
const char* kTgi = R"(# TYPE tgi_request_count counter
tgi_request_count 12
# TYPE tgi_request_success counter
tgi_request_success 10
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="50"} 4
tgi_request_input_length_bucket{le="+Inf"} 10
tgi_request_input_length_sum 2345
tgi_request_input_length_count 10
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="1"} 0
tgi_request_generated_tokens_bucket{le="+Inf"} 10
tgi_request_generated_tokens_sum 1280
tgi_request_generated_tokens_count 10
)";

// NVIDIA Triton (nv_inference_count per model and version) with the TensorRT-LLM backend's token histograms.
const char* kTriton =
    R"(# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="ensemble",version="1"} 20
nv_inference_request_success{model="tensorrt_llm",version="1"} 20
# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
nv_inference_count{model="ensemble",version="1"} 20
nv_inference_count{model="tensorrt_llm",version="1"} 20
nv_inference_count{model="tensorrt_llm",version="2"} 5
# HELP nv_llm_input_token_len TRT LLM response metrics
# TYPE nv_llm_input_token_len histogram
nv_llm_input_token_len_count{model="tensorrt_llm",response_metric_type="total_input_tokens",version="1"} 20
nv_llm_input_token_len_sum{model="tensorrt_llm",response_metric_type="total_input_tokens",version="1"} 3000
nv_llm_input_token_len_bucket{model="tensorrt_llm",response_metric_type="total_input_tokens",version="1",le="10"} 0
nv_llm_input_token_len_bucket{model="tensorrt_llm",response_metric_type="total_input_tokens",version="1",le="+Inf"} 20
# HELP nv_llm_output_token_len TRT LLM response metrics
# TYPE nv_llm_output_token_len histogram
nv_llm_output_token_len_count{model="tensorrt_llm",response_metric_type="total_output_tokens",version="1"} 20
nv_llm_output_token_len_sum{model="tensorrt_llm",response_metric_type="total_output_tokens",version="1"} 2000
)";

// ---- parser ------------------------------------------------------------------------------------

TEST(ExpositionParser, CommentsHelpTypeEscapesTimestampsAndSpecialValues) {
  const std::string text =
      "# a plain comment\n"
      "   \n"
      "# HELP m_total A \\\\ help\\nline \\x kept\n"
      "# TYPE m_total counter\n"
      "m_total{a=\"x\\\"y\",b=\"back\\\\slash\",c=\"new\\nline\",} 12.5 1700000000123\n"
      "m_total { a = \"2\" } +Inf\n"
      "m_total -Inf -5\n"
      "m_total NaN\r\n"
      "m2 1e3\t\n"
      "# TYPE h histogram\n"
      "h_bucket{le=\"0.1\"} 1\n"
      "h_bucket{le=\"+Inf\"} 3\n"
      "h_sum 0.7\n"
      "h_count 3\n"
      "om_total 4 # {trace_id=\"abc\"} 1.0\n"
      "# EOF\n"
      "this is not parsed\n";
  auto e = parse_exposition(text);
  ASSERT_TRUE(e) << e.error().message;
  ASSERT_EQ(e->samples.size(), 10u);
  const auto& s0 = e->samples[0];
  EXPECT_EQ(s0.name, "m_total");
  ASSERT_EQ(s0.labels.size(), 3u);
  EXPECT_EQ(*s0.label("a"), "x\"y");
  EXPECT_EQ(*s0.label("b"), "back\\slash");
  EXPECT_EQ(*s0.label("c"), "new\nline");
  EXPECT_EQ(s0.label("d"), nullptr);
  EXPECT_EQ(s0.value, 12.5);
  EXPECT_EQ(s0.timestamp_ms, 1700000000123);
  EXPECT_EQ(*e->samples[1].label("a"), "2");
  EXPECT_TRUE(std::isinf(e->samples[1].value) && e->samples[1].value > 0);
  EXPECT_TRUE(std::isinf(e->samples[2].value) && e->samples[2].value < 0);
  EXPECT_EQ(e->samples[2].timestamp_ms, -5);
  EXPECT_TRUE(std::isnan(e->samples[3].value));
  EXPECT_EQ(e->samples[4].value, 1000);
  EXPECT_EQ(*e->samples[6].label("le"), "+Inf");
  EXPECT_EQ(e->samples[8].name, "h_count");
  EXPECT_EQ(e->samples[9].name, "om_total");
  EXPECT_EQ(e->types.at("m_total"), "counter");
  EXPECT_EQ(e->types.at("h"), "histogram");
  EXPECT_EQ(e->help.at("m_total"), "A \\ help\nline \\x kept");
}

TEST(ExpositionParser, MalformedLinesFailWithLineAndColumn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ok 1\nbad{a=\"1\"\n", "line 2"},
      {"m{a=\"unterminated} 1\n", "unterminated label value"},
      {"m{a=\"\\t\"} 1\n", "invalid escape"},
      {"m{a=\"1\",a=\"2\"} 1\n", "label a given twice"},
      {"m\n", "missing sample value"},
      {"m 12abc\n", "invalid sample value '12abc'"},
      {"m 0x10\n", "invalid sample value"},
      {"m 1 2 3\n", "unexpected text after the sample"},
      {"m 1 1.5\n", "invalid timestamp"},
      {"9m 1\n", "expected a metric name"},
      {"m{9=\"1\"} 1\n", "expected a label name"},
      {"m{a=1} 1\n", "expected '\"'"},
      {"# TYPE m counter\n# TYPE m gauge\n", "second TYPE line"},
      {"# TYPE m bogus\n", "unknown metric type"},
      {"m{a=\"1\"}1\n", "expected a blank"},
      {std::string("m 1\nn\0 1\n", 9), "NUL byte"},
  };
  for (const auto& [text, says] : cases) {
    auto e = parse_exposition(text);
    ASSERT_FALSE(e) << text;
    EXPECT_NE(e.error().message.find(says), std::string::npos) << text << " -> " << e.error().message;
    EXPECT_NE(e.error().message.find("line "), std::string::npos) << e.error().message;
  }
  EXPECT_NE(parse_exposition("ok 1\nbad{a=\"1\"\n").error().message.find("line 2, column"),
            std::string::npos);
}

TEST(ExpositionParser, EmptyAndCommentOnlyTextsHaveNoSamples) {
  EXPECT_TRUE(parse_exposition("")->samples.empty());
  EXPECT_TRUE(parse_exposition("# HELP x y\n\n")->samples.empty());
}

// ---- engines (stand-ins) --------------------------------------------------------------------------

TEST(InferenceEngineStandIn, VllmV1SumsEnginesAndFinishReasonsPerModel) {
  auto e = parse_exposition(vllm_text("meta-llama/Llama-3.1-8B-Instruct", 2000, 640, 10, 512));
  ASSERT_TRUE(e) << e.error().message;
  auto r = read_engine(*e, "default");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->engine, InferenceEngine::vllm);
  ASSERT_EQ(r->models.size(), 1u);
  const ModelTotals& m = r->models.at("meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ(m.prompt_tokens, 2000);  // engine 0 + engine 1
  EXPECT_EQ(m.generated_tokens, 640);
  EXPECT_EQ(m.requests, 10);  // stop + length + abort
  EXPECT_EQ(m.cached_tokens, 512);
  EXPECT_EQ(r->start_time_s, 1.76e9);
}

TEST(InferenceEngineStandIn, VllmKvCacheUsageUnderTheOldAndTheNewName) {
  const std::string counters = "vllm:prompt_tokens_total{model_name=\"m\"} 10\n";
  auto old_name =
      read_engine(*parse_exposition(counters + "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n"), "d");
  ASSERT_TRUE(old_name) << old_name.error().message;
  EXPECT_EQ(old_name->models.at("m").kv_cache_usage_ratio, 0.25);
  // vLLM >= 0.10 exports the new name (and for two releases the old one too): the new one wins.
  auto both = read_engine(
      *parse_exposition(counters + "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n"
                                   "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.75\n"
                                   "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.1\n"),
      "d");
  ASSERT_TRUE(both) << both.error().message;
  EXPECT_EQ(both->models.at("m").kv_cache_usage_ratio, 0.75) << "the fullest engine";
  auto none =
      read_engine(*parse_exposition(counters + "vllm:kv_cache_usage_perc{model_name=\"m\"} NaN\n"), "d");
  EXPECT_FALSE(none->models.at("m").kv_cache_usage_ratio);
}

TEST(InferenceEngineStandIn, SglangSumsCacheSources) {
  auto r = read_engine(*parse_exposition(kSglang), "default");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->engine, InferenceEngine::sglang);
  const ModelTotals& m = r->models.at("Qwen/Qwen2.5-7B-Instruct");
  EXPECT_EQ(m.prompt_tokens, 8128902);
  EXPECT_EQ(m.generated_tokens, 7557572);
  EXPECT_EQ(m.cached_tokens, 1024);
  EXPECT_EQ(m.requests, 4500);
  EXPECT_FALSE(r->start_time_s);
}

TEST(InferenceEngineStandIn, TgiTokenHistogramSumsUnderTheGivenModel) {
  auto r = read_engine(*parse_exposition(kTgi), "mistral-7b");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->engine, InferenceEngine::tgi);
  ASSERT_EQ(r->models.count("mistral-7b"), 1u);
  const ModelTotals& m = r->models.at("mistral-7b");
  EXPECT_EQ(m.prompt_tokens, 2345);
  EXPECT_EQ(m.generated_tokens, 1280);
  EXPECT_EQ(m.requests, 10);
  EXPECT_FALSE(m.cached_tokens);
}

TEST(InferenceEngineStandIn, TritonInferenceCountPerModelWithTensorRtLlmTokens) {
  auto r = read_engine(*parse_exposition(kTriton), "default");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->engine, InferenceEngine::triton);
  ASSERT_EQ(r->models.size(), 2u);
  EXPECT_EQ(r->models.at("tensorrt_llm").requests, 25);  // versions 1 and 2
  EXPECT_EQ(r->models.at("tensorrt_llm").prompt_tokens, 3000);
  EXPECT_EQ(r->models.at("tensorrt_llm").generated_tokens, 2000);
  EXPECT_EQ(r->models.at("ensemble").requests, 20);
  EXPECT_FALSE(r->models.at("ensemble").generated_tokens);
}

TEST(InferenceEngineStandIn, UnknownExpositionIsAnError) {
  auto r = read_engine(*parse_exposition("node_cpu_seconds_total{cpu=\"0\"} 1\n"), "default");
  EXPECT_FALSE(r);
}

// ---- counters, split, specs ------------------------------------------------------------------------

TEST(InferenceCounters, ResetsAreNeverNegativeNorDoubled) {
  CounterDelta d;
  EXPECT_EQ(d.add(100, false), 0);  // baseline
  EXPECT_EQ(d.add(150, false), 50);
  EXPECT_EQ(d.add(150, false), 0);
  EXPECT_EQ(d.add(30, false), 30);  // the engine restarted and served 30 since
  EXPECT_EQ(d.add(40, false), 10);
  EXPECT_EQ(d.add(45, true), 45);  // restart seen from a new process start time, counters already past 40
  EXPECT_EQ(d.resets(), 2u);
  CounterDelta fresh;
  fresh.start_from_zero();
  EXPECT_EQ(fresh.add(7, false), 7);
}

TEST(InferenceCounters, SplitCostIsExactAndProportional) {
  const auto s = split_cost(1001, {3, 1});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0] + s[1], 1001);
  EXPECT_EQ(s[0], 751);
  const auto eq = split_cost(10, {0, 0, 0});
  EXPECT_EQ(eq[0] + eq[1] + eq[2], 10);
  EXPECT_EQ(eq[0], 4);
  EXPECT_TRUE(split_cost(5, {}).empty());
  EXPECT_EQ(split_cost(0, {1, 2})[1], 0);
}

TEST(InferenceEndpointSpecs, ParseOptionsAndHideCredentials) {
  auto s = parse_inference_endpoint(
      "http://user:secret@10.0.0.5:8000/metrics?token=abc,owner=ml-team/vllm-0,model=llama");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->scheme_host_port, "http://10.0.0.5:8000");
  EXPECT_EQ(s->path, "/metrics?token=abc");
  EXPECT_EQ(s->display, "http://10.0.0.5:8000/metrics");
  EXPECT_EQ(s->owner, "ml-team/vllm-0");
  EXPECT_EQ(s->model, "llama");
  EXPECT_EQ(endpoint_port(*s), 8000);
  auto d = parse_inference_endpoint("https://vllm.local");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->path, "/metrics");
  EXPECT_EQ(d->owner, "");
  EXPECT_EQ(endpoint_port(*d), 443);
  for (const char* bad : {"vllm:8000/metrics", "http://", "http://h:1/m,owner", "http://h:1/m,colour=red"}) {
    auto b = parse_inference_endpoint(bad);
    ASSERT_FALSE(b) << bad;
    EXPECT_EQ(b.error().kind, ErrorKind::usage);
    EXPECT_NE(b.error().message.find("--inference-endpoint"), std::string::npos);
  }
}

TEST(InferenceEndpointSpecs, ConfigFileKey) {
  test::TempDir dir;
  const std::string ok = dir.write("ok.toml",
                                   "[pricing]\nprice_usd_per_gpu_hour = 2\n[agent]\ninference_endpoints = "
                                   "[\"http://127.0.0.1:8000/metrics\", \"http://h:9/m,model=tgi-7b\"]\n");
  auto specs = load_inference_endpoints(ok);
  ASSERT_TRUE(specs) << specs.error().message;
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ(specs->at(1).model, "tgi-7b");
  EXPECT_TRUE(load_inference_endpoints(dir.write("none.toml", "[pricing]\n"))->empty());
  auto bad =
      load_inference_endpoints(dir.write("bad.toml", "[agent]\ninference_endpoints = [\"vllm:8000\"]\n"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("bad.toml: agent.inference_endpoints 'vllm:8000'"), std::string::npos)
      << bad.error().message;
  auto syntax = load_inference_endpoints(dir.write("syntax.toml", "[agent\n"));
  ASSERT_FALSE(syntax);
  EXPECT_NE(syntax.error().message.find("syntax.toml:1:"), std::string::npos) << syntax.error().message;
  EXPECT_FALSE(load_inference_endpoints(dir.path() + "/missing.toml"));
}

TEST(InferenceListeners, FindsTheProcessListeningOnAPortInAProcTree) {
  test::TempDir dir;
  const std::string proc = dir.path() + "/proc";
  fs::create_directories(proc + "/net");
  fs::create_directories(proc + "/4242/fd");
  fs::create_directories(proc + "/77/fd");
  std::ofstream(proc + "/net/tcp")
      << "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
         "   0: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
         "   1: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 98765 "
         "1\n";
  std::ofstream(proc + "/net/tcp6") << "  sl  local_address ...\n";
  for (std::uint32_t pid : {4242u, 77u}) test::write_fake_process(proc, pid, "x", "");
  fs::create_symlink("socket:[111]", proc + "/77/fd/3");
  fs::create_symlink("socket:[98765]", proc + "/4242/fd/7");
  EXPECT_EQ(find_listening_pid(proc, 8000),
            4242u);  // 0x1F40; the connected socket of PID 77 is not a listener
  EXPECT_EQ(find_listening_pid(proc, 8001), std::nullopt);
}

TEST(InferenceDiscovery, ListeningPortsOfTheGivenProcessesOnly) {
  test::TempDir dir;
  const std::string proc = dir.path() + "/proc";
  fs::create_directories(proc + "/net");
  for (const char* pid : {"10", "20", "30"}) fs::create_directories(proc + "/" + std::string(pid) + "/fd");
  std::ofstream(proc + "/net/tcp")
      << "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
         "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 501 1\n"
         "   1: 0100007F:1F41 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 502 1\n"
         "   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 503 1\n";
  std::ofstream(proc + "/net/tcp6")
      << "  sl  local_address                         remote_address                        st tx_queue "
         "rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
         "   0: 00000000000000000000000000000000:7530 00000000000000000000000000000000:0000 0A "
         "00000000:00000000 "
         "00:00000000 00000000     0        0 601 1\n";
  fs::create_symlink("socket:[501]", proc + "/10/fd/5");  // 8000, listening
  fs::create_symlink("socket:[502]", proc + "/10/fd/6");  // 8001, a connection: not a port it serves
  fs::create_symlink("socket:[601]", proc + "/20/fd/3");  // 30000 over IPv6
  fs::create_symlink("socket:[503]", proc + "/30/fd/3");  // 80, not offered
  fs::create_symlink("/dev/null", proc + "/10/fd/0");
  EXPECT_EQ(listening_ports(proc, {10, 20}), (std::vector<std::uint16_t>{8000, 30000}));
  EXPECT_EQ(listening_ports(proc, {30}), (std::vector<std::uint16_t>{80}));
  EXPECT_TRUE(listening_ports(proc, {99}).empty());
}

// A kubelet /pods answer in the PodList format of the Kubernetes API (core/v1), written here as a stand-in
// for a kubelet: a running vLLM pod with prometheus.io annotations, a pod that opts out, a pending one, one
// without the port annotation and one with a bad port.
std::string kubelet_pod_list(const std::string& ip, int port) {
  return R"({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
    {"metadata": {"name": "vllm-0", "namespace": "ml", "uid": "1b4e-1",
                  "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": ")" +
         std::to_string(port) + R"(", "prometheus.io/path": "/metrics"}},
     "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.10.0"}]},
     "status": {"phase": "Running", "podIP": ")" +
         ip + R"(", "podIPs": [{"ip": ")" + ip + R"("}]}},
    {"metadata": {"name": "exporter", "namespace": "mon",
                  "annotations": {"prometheus.io/scrape": "false", "prometheus.io/port": "9100"}},
     "status": {"phase": "Running", "podIP": "10.1.0.9"}},
    {"metadata": {"name": "tgi-1", "namespace": "ml", "annotations": {"prometheus.io/port": "80"}},
     "status": {"phase": "Pending"}},
    {"metadata": {"name": "plain", "namespace": "default"}, "status": {"phase": "Running", "podIP": "10.1.0.7"}},
    {"metadata": {"name": "odd", "namespace": "ml", "annotations": {"prometheus.io/port": "http"}},
     "status": {"phase": "Running", "podIP": "10.1.0.8"}},
    {"metadata": {"name": "v6", "namespace": "ml",
                  "annotations": {"prometheus.io/port": "8080", "prometheus.io/path": "stats",
                                  "prometheus.io/scheme": "https"}},
     "status": {"phase": "Running", "podIP": "fd00::7"}}]})";
}

TEST(InferenceDiscovery, KubeletPodListStandInAnnotationsGiveUrlsAndOwners) {
  auto t = parse_kubelet_pods(kubelet_pod_list("10.1.0.5", 8000), "kubelet");
  ASSERT_TRUE(t) << t.error().message;
  ASSERT_EQ(t->targets.size(), 2u);
  EXPECT_EQ(t->malformed, 0u);
  EXPECT_EQ(t->targets[0].owner, "ml/vllm-0");
  EXPECT_EQ(t->targets[0].url, "http://10.1.0.5:8000/metrics");
  EXPECT_EQ(t->targets[1].owner, "ml/v6");
  EXPECT_EQ(t->targets[1].url, "https://[fd00::7]:8080/stats");
  auto bad = parse_kubelet_pods("<html>", "http://127.0.0.1:10255/pods");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("http://127.0.0.1:10255/pods"), std::string::npos);
}

// The answer that aborted the agent (issue 34): "metadata" a string. Wrong types at every level of a pod
// skip that pod, are counted and named by path; the well-formed pods of the same answer are still used.
TEST(InferenceDiscovery, KubeletPodListOfWrongTypesNeverThrowsAndNamesTheFirstBadPart) {
  const std::string good =
      R"({"metadata": {"name": "ok", "namespace": "ml", "annotations": {"prometheus.io/port": "8000"}},
          "status": {"phase": "Running", "podIP": "10.1.0.5"}})";
  const std::string list = R"({"items": [{"metadata": "vllm-0"}, )" + good +
                           R"(, {"metadata": {"annotations": [1]}}, {"status": {"podIP": 7}}, null, 12,
      {"metadata": {"name": {"x": 1}, "annotations": {"prometheus.io/port": 1e999999}}}]})";
  auto t = parse_kubelet_pods(list, "kubelet");
  ASSERT_FALSE(t);  // 1e999999 is out of a double's range: the whole answer is not JSON
  auto t2 =
      parse_kubelet_pods(R"({"items": [{"metadata": "vllm-0"}, )" + good +
                             R"(, {"metadata": {"annotations": [1]}}, {"status": {"podIP": 7}}, null, 12,
           {"metadata": {"name": {"x": 1}, "annotations": {"prometheus.io/port": 18446744073709551616}}}]})",
                         "kubelet");
  ASSERT_TRUE(t2) << t2.error().message;
  ASSERT_EQ(t2->targets.size(), 1u);
  EXPECT_EQ(t2->targets[0].owner, "ml/ok");
  EXPECT_EQ(t2->malformed, 6u);
  EXPECT_EQ(t2->problem, "kubelet: items[0].metadata: expected an object, got a string");
  for (const char* not_a_list :
       {"[]", "null", R"({"items": {}})", R"({"items": null})", "\"items\"", "1e5"}) {
    auto r = parse_kubelet_pods(not_a_list, "kubelet");
    ASSERT_FALSE(r) << not_a_list;
    EXPECT_EQ(r.error().message.rfind("kubelet: ", 0), 0u) << r.error().message;
  }
}

// ---- the cost join, against a loopback HTTP server -----------------------------------------------------

// A stand-in engine: serves whatever text the test sets, on 127.0.0.1.
class StandInEngine {
 public:
  StandInEngine() {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::string body;
      int status = 200;
      int delay_ms = 0;
      {
        std::lock_guard lock(mu_);
        body = body_;
        status = status_;
        delay_ms = delay_ms_;
      }
      if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      res.status = status;
      res.set_content(body, "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~StandInEngine() {
    server_.stop();
    thread_.join();
  }
  void set(std::string body, int status = 200, int delay_ms = 0) {
    std::lock_guard lock(mu_);
    body_ = std::move(body);
    status_ = status;
    delay_ms_ = delay_ms;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/metrics"; }

 private:
  httplib::Server server_;
  std::thread thread_;
  std::mutex mu_;
  std::string body_;
  int status_ = 200;
  int delay_ms_ = 0;
  int port_ = 0;
};

// One GPU at 3.6 $/h (1000 micro-dollars a second) shared 75:25 by two containers, each serving an engine.
struct JoinFixture {
  test::TempDir dir;
  std::string proc = dir.path() + "/proc";
  gpu::StaticGpuBackend backend;
  util::FakeClock clock;
  std::unique_ptr<sys::OwnerResolver> resolver;
  const std::string a = std::string(12, 'a'), b = std::string(12, 'b');
  JoinFixture() {
    test::write_fake_process(proc, 100, "vllm",
                             "0::/system.slice/docker-" + std::string(64, 'a') + ".scope\n");
    test::write_fake_process(proc, 200, "python3",
                             "0::/system.slice/docker-" + std::string(64, 'b') + ".scope\n");
    backend.infos.push_back(test::h100_info(0));
    gpu::Capabilities c;
    c.utilization = c.memory = c.processes = c.process_utilization = true;
    backend.caps.push_back(c);
    gpu::DeviceSample s;
    s.utilization_pct = 90;
    s.memory_used_bytes = 40ull << 30;
    s.processes = {{100, 30ull << 30, 75}, {200, 10ull << 30, 25}};
    backend.samples.push_back(s);
    resolver = std::make_unique<sys::OwnerResolver>(
        sys::OwnerOptions{proc, dir.path() + "/pods", dir.path() + "/containers"});
  }
  AgentOptions options(const std::vector<std::string>& endpoints) {
    AgentOptions o;
    for (const auto& e : endpoints) o.inference_endpoints.push_back(*parse_inference_endpoint(e));
    o.proc_root = proc;
    return o;
  }
  std::vector<std::optional<meter::PriceQuote>> prices() const { return {test::flag_price(3.6)}; }
};

const InferenceModelCounters* find_model(const Snapshot& s, const std::string& owner,
                                         const std::string& model) {
  for (const auto& m : s.inference)
    if (m.owner.name == owner && m.model == model) return &m;
  return nullptr;
}

MicroUsd owner_cost(const Snapshot& s, const std::string& name) {
  MicroUsd c = 0;
  for (const auto& [key, o] : s.owners)
    if (o.name == name)
      for (const auto& d : s.devices)
        if (auto it = d.owners.find(key); it != d.owners.end()) c += it->second.cost;
  return c;
}

// Two models on one server (split by generated tokens) and two servers on one GPU (each pays its own share):
// Σ model cost = each owner's cost since the first scrape, and Σ over owners = the device cost in that time.
TEST(InferenceJoin, TwoModelsOneServerAndTwoServersOneGpuSumToTheDeviceCost) {
  JoinFixture fx;
  StandInEngine eng_a, eng_b;
  auto two_models = [](double n) {
    return vllm_text("llama", 100 * n, 30 * n, n, 0) +
           "vllm:generation_tokens_total{model_name=\"lora-sql\",engine=\"0\"} " + std::to_string(10 * n) +
           "\n" + "vllm:prompt_tokens_total{model_name=\"lora-sql\",engine=\"0\"} " + std::to_string(20 * n) +
           "\n";
  };
  eng_a.set(two_models(0));
  eng_b.set(vllm_text("qwen", 0, 0, 0, 0));
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(),
              fx.options({eng_a.url() + ",owner=" + fx.a, eng_b.url() + ",owner=" + fx.b}));
  c.collect_once();  // device baseline; owners linked, engines' baselines
  const MicroUsd device0 = c.snapshot().devices[0].cost;
  const MicroUsd a0 = owner_cost(c.snapshot(), fx.a), b0 = owner_cost(c.snapshot(), fx.b);
  for (int i = 1; i <= 5; ++i) {
    eng_a.set(two_models(i * 10));
    eng_b.set(vllm_text("qwen", 50.0 * i, 40.0 * i, 2.0 * i, 0));
    fx.clock.advance_ns(1'000'000'000);
    c.collect_once();
  }
  const Snapshot s = c.snapshot();
  const auto* llama = find_model(s, fx.a, "llama");
  const auto* lora = find_model(s, fx.a, "lora-sql");
  const auto* qwen = find_model(s, fx.b, "qwen");
  ASSERT_TRUE(llama && lora && qwen);
  const MicroUsd a_cost = owner_cost(s, fx.a) - a0, b_cost = owner_cost(s, fx.b) - b0;
  EXPECT_EQ(a_cost, 3750);  // 5 s × 1000 µ$/s × 75 %
  EXPECT_EQ(b_cost, 1250);
  EXPECT_EQ(llama->cost + lora->cost, a_cost);
  EXPECT_EQ(qwen->cost, b_cost);
  EXPECT_EQ(llama->cost + lora->cost + qwen->cost, s.devices[0].cost - device0);
  // Generated tokens 30:10 per step: llama pays three quarters of its server's cost.
  EXPECT_EQ(llama->cost, 2815);  // 750 × 300/400 = 562.5 each interval; the tie goes to the first model
  EXPECT_EQ(llama->generated_tokens, 1500);
  EXPECT_EQ(llama->prompt_tokens, 5000);
  EXPECT_EQ(lora->generated_tokens, 500);
  EXPECT_EQ(qwen->requests, 10);
  // The live figures over the window are cost ÷ tokens exactly.
  const std::string text = exposition_text(c);
  const std::string llama_sel = "owner_kind=\"container\",owner=\"" + fx.a + "\",container=\"" + fx.a +
                                "\",user=\"root\",model=\"llama\"";
  auto value = [&](const std::string& line_prefix) {
    const auto pos = text.find("\n" + line_prefix);
    EXPECT_NE(pos, std::string::npos) << line_prefix << "\n" << text;
    if (pos == std::string::npos) return std::nan("");
    const auto eol = text.find('\n', pos + 1);
    const std::string line = text.substr(pos + 1, eol - pos - 1);
    return std::stod(line.substr(line.rfind(' ') + 1));
  };
  EXPECT_NEAR(value("gpumeter_inference_usd_per_1m_tokens{" + llama_sel + ",kind=\"generated\"}"),
              2815e-6 / 1500 * 1e6, 1e-9);
  EXPECT_NEAR(value("gpumeter_inference_usd_per_1m_tokens{" + llama_sel + ",kind=\"total\"}"),
              2815e-6 / 6500 * 1e6, 1e-9);
  EXPECT_NEAR(value("gpumeter_inference_usd_per_1k_requests{" + llama_sel + "}"), 2815e-6 / 50 * 1e3, 1e-9);
  EXPECT_NEAR(value("gpumeter_inference_cost_usd_total{" + llama_sel + "}"), 0.002815, 1e-12);
  EXPECT_EQ(value("gpumeter_inference_tokens_total{" + llama_sel + ",kind=\"cached\"}"), 0);
  // Constant load: the peak rate is the mean rate, so the cost at peak is the live cost.
  EXPECT_NEAR(value("gpumeter_inference_load_ratio{" + llama_sel + "}"), 1.0, 1e-9);
  EXPECT_NEAR(value("gpumeter_inference_usd_per_1m_tokens_at_peak{" + llama_sel + "}"), 2815e-6 / 1500 * 1e6,
              1e-9);
}

TEST(InferenceJoin, EngineRestartNeverYieldsNegativeOrDoubledTokens) {
  JoinFixture fx;
  StandInEngine eng;
  eng.set(vllm_text("llama", 1000, 500, 10, 0));
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(), fx.options({eng.url() + ",owner=" + fx.a}));
  c.collect_once();  // baseline at 500 generated
  eng.set(vllm_text("llama", 1100, 600, 11, 0));
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();                           // +100
  eng.set(vllm_text("llama", 40, 20, 1, 0));  // restarted: counters from zero
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();  // +20
  eng.set(vllm_text("llama", 60, 25, 2, 0));
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();  // +5
  const Snapshot s = c.snapshot();
  const auto* m = find_model(s, fx.a, "llama");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->generated_tokens, 125);
  EXPECT_EQ(m->requests, 3);
  EXPECT_EQ(m->cost, 2250);  // every interval after the baseline is charged, restart included
  EXPECT_EQ(s.endpoints.at(0).resets, 1u);
  EXPECT_NE(
      exposition_text(c).find("gpumeter_inference_engine_restarts_total{endpoint=\"" + eng.url() + "\"} 1\n"),
      std::string::npos);
}

// The state file carries the serving counters and each endpoint's last engine counters across an agent
// restart: what the engine served while the agent was down counts once (not lost as a new baseline, not
// counted twice).
TEST(InferenceJoin, AgentRestartWithStateFileNeitherLosesNorDoublesTokens) {
  JoinFixture fx;
  StandInEngine eng;
  AgentOptions o = fx.options({eng.url() + ",owner=" + fx.a});
  o.state_path = fx.dir.path() + "/state.json";
  eng.set(vllm_text("llama", 1000, 500, 10, 0));
  {
    Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(), o);
    ASSERT_TRUE(c.load_state());
    c.collect_once();  // baseline at 500 generated
    eng.set(vllm_text("llama", 1100, 600, 11, 0));
    fx.clock.advance_ns(1'000'000'000);
    c.collect_once();  // +100, 750 µ$ (75 % of 1000 µ$/s)
    ASSERT_TRUE(c.save_state());
  }
  eng.set(vllm_text("llama", 1300, 700, 14, 0));  // served while the agent was down
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(), o);
  ASSERT_TRUE(c.load_state());
  {
    const Snapshot restored = c.snapshot();
    const auto* m = find_model(restored, fx.a, "llama");
    ASSERT_TRUE(m) << "restored before the first scrape";
    EXPECT_EQ(m->generated_tokens, 100);
    EXPECT_EQ(m->cost, 750);
  }
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();  // +100 since the save (first sample of this agent: no interval to charge yet)
  eng.set(vllm_text("llama", 1400, 750, 15, 0));
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();  // +50
  const Snapshot s = c.snapshot();
  const auto* m = find_model(s, fx.a, "llama");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->generated_tokens, 250);
  EXPECT_EQ(m->prompt_tokens, 400);
  EXPECT_EQ(m->requests, 5);
  EXPECT_EQ(m->cost, 1500);
  EXPECT_EQ(s.endpoints.at(0).resets, 0u);
  // A state file of an older agent (no "inference" key) still loads.
  std::ofstream(o.state_path) << R"({"format": "gpumeter-agent-state", "version": 1, "devices": {}})";
  Collector old(fx.backend, *fx.resolver, fx.clock, fx.prices(), o);
  EXPECT_TRUE(old.load_state());
}

// Port discovery on a proc tree: the GPU process (PID 300) does not listen, its parent in the same cgroup
// (the API server, PID 200) listens on the stand-in engine's port; a parent in another cgroup (PID 100) is
// not asked.
TEST(InferenceDiscovery, ParentOfTheGpuProcessListeningOnAnEnginePortIsFound) {
  test::TempDir dir;
  StandInEngine eng;
  eng.set(vllm_text("llama", 10, 5, 1, 0));
  const int port = std::stoi(eng.url().substr(eng.url().rfind(':') + 1));
  const std::string proc = dir.path() + "/proc";
  fs::create_directories(proc + "/net");
  auto add = [&](std::uint32_t pid, std::uint32_t ppid, const std::string& cgroup) {
    test::FakeProcess p;
    p.pid = pid;
    p.comm = "p";
    p.cgroup = cgroup;
    p.ppid = ppid;
    test::write_fake_process(proc, p);
  };
  add(100, 1, "0::/system.slice/other.service\n");
  add(200, 100, "0::/system.slice/docker-x.scope\n");
  add(300, 200, "0::/system.slice/docker-x.scope\n");
  char hex[8];
  std::snprintf(hex, sizeof hex, "%04X", port);
  std::ofstream(proc + "/net/tcp")
      << "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
         "   0: 0100007F:"
      << hex << " 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7001 1\n";
  fs::create_symlink("socket:[7001]", proc + "/200/fd/4");
  DiscoveryOptions o;
  o.proc_root = proc;
  o.timeout_ms = 1000;
  EndpointDiscovery d(o);
  std::vector<InferenceEndpointSpec> found;
  for (int i = 0; i < 100 && found.empty(); ++i) {
    d.offer({300});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    found = d.take_found();
  }
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].display, eng.url());
  EXPECT_TRUE(found[0].owner.empty()) << "linked through the listening process, like a URL without owner=";
  d.offer({300});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(d.take_found().empty()) << "each port is probed once";
}

// --inference-discover with a stand-in kubelet (an HTTP server answering /pods with a PodList): the annotated
// pod's endpoint is probed, found to be a vLLM engine and scraped every interval from then on; it links to
// its pod once that pod is on a GPU (here it is not: linked 0, nothing charged).
TEST(InferenceDiscovery, KubeletStandInAnnotatedPodBecomesAnEndpointWithoutTheFlag) {
  JoinFixture fx;
  StandInEngine eng;
  eng.set(vllm_text("llama", 100, 50, 1, 0));
  httplib::Server kubelet;
  const int engine_port = std::stoi(eng.url().substr(eng.url().rfind(':') + 1));
  kubelet.Get("/pods", [&](const httplib::Request& req, httplib::Response& res) {
    EXPECT_EQ(req.get_header_value("Authorization"), "Bearer s3cret");
    res.set_content(kubelet_pod_list("127.0.0.1", engine_port), "application/json");
  });
  const int kport = kubelet.bind_to_any_port("127.0.0.1");
  std::thread kt([&] { kubelet.listen_after_bind(); });
  AgentOptions o = fx.options({});
  o.inference_discover = true;
  o.kubelet_pods_url = "http://127.0.0.1:" + std::to_string(kport) + "/pods";
  o.kubelet_token_file = fx.dir.path() + "/token";
  std::ofstream(o.kubelet_token_file) << "s3cret\n";
  {
    Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(), o);
    bool found = false;
    for (int i = 0; i < 100 && !found; ++i) {
      c.collect_once();
      fx.clock.advance_ns(100'000'000);
      const Snapshot s = c.snapshot();
      found = !s.endpoints.empty() && s.endpoints[0].up;
      if (!found) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(found);
    const Snapshot s = c.snapshot();
    ASSERT_EQ(s.endpoints.size(), 1u);
    EXPECT_EQ(s.endpoints[0].endpoint, eng.url());
    EXPECT_EQ(s.endpoints[0].engine, InferenceEngine::vllm);
    EXPECT_FALSE(s.endpoints[0].linked);
  }
  kubelet.stop();
  kt.join();
}

// Down, slow and garbage endpoints are counted by reason, and never hold a collection past half an interval;
// the cost of intervals without a good scrape is charged with the tokens of the next good one.
TEST(InferenceJoin, DownSlowAndGarbageEndpointsAreCountedAndNeverStallTheInterval) {
  JoinFixture fx;
  StandInEngine eng;
  eng.set(vllm_text("llama", 0, 0, 0, 0));
  AgentOptions o = fx.options({eng.url() + ",owner=" + fx.a, "http://127.0.0.1:1/metrics,owner=" + fx.b});
  o.interval_ms = 400;
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(), o);
  c.collect_once();
  auto timed = [&] {
    fx.clock.advance_ns(1'000'000'000);
    const auto t = std::chrono::steady_clock::now();
    c.collect_once();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  eng.set("vllm:generation_tokens_total{model_name=\"llama\" 12\n");  // garbage
  EXPECT_LT(timed(), 0.3);
  eng.set(vllm_text("llama", 0, 10, 1, 0), 503);
  EXPECT_LT(timed(), 0.3);
  eng.set(vllm_text("llama", 0, 10, 1, 0), 200, 1500);  // slower than the interval allows
  EXPECT_LT(timed(), 0.35);
  eng.set(vllm_text("llama", 0, 40, 4, 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));  // let the slow answer drain
  EXPECT_LT(timed(), 0.3);
  const Snapshot s = c.snapshot();
  const EndpointView& good = s.endpoints.at(0);
  const EndpointView& down = s.endpoints.at(1);
  EXPECT_TRUE(good.up);
  EXPECT_EQ(good.errors.at("parse"), 1u);
  EXPECT_EQ(good.errors.at("http"), 1u);
  EXPECT_EQ(good.errors.count("timeout") + good.errors.count("deadline"), 1u);
  EXPECT_FALSE(down.up);
  EXPECT_EQ(down.errors.at("connect"), 5u);
  EXPECT_NE(down.last_error.find("connect"), std::string::npos);
  const auto* m = find_model(s, fx.a, "llama");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->generated_tokens, 40);
  EXPECT_EQ(m->cost, 3000);  // four intervals of 750 µ$: three waited for the fourth's good scrape
  const std::string text = exposition_text(c);
  EXPECT_NE(text.find("gpumeter_inference_scrape_errors_total{endpoint=\"http://127.0.0.1:1/"
                      "metrics\",reason=\"connect\"} 5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpumeter_inference_endpoint_up{endpoint=\"http://127.0.0.1:1/metrics\"} 0\n"),
            std::string::npos);
}

TEST(InferenceJoin, NoOwnerOnAGpuMeansNoChargeAndNotLinked) {
  JoinFixture fx;
  StandInEngine eng;
  eng.set(vllm_text("llama", 0, 0, 0, 0));
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(), fx.options({eng.url() + ",owner=nobody"}));
  c.collect_once();
  eng.set(vllm_text("llama", 10, 10, 1, 0));
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();
  const Snapshot s = c.snapshot();
  EXPECT_TRUE(s.inference.empty());
  EXPECT_FALSE(s.endpoints.at(0).linked);
  EXPECT_TRUE(s.endpoints.at(0).up);
  EXPECT_NE(exposition_text(c).find("gpumeter_inference_endpoint_linked{endpoint=\"" + eng.url() + "\"} 0\n"),
            std::string::npos);
}

}  // namespace
}  // namespace gm::agent
