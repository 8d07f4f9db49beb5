// The node's idleness answer (agent/idle.h): the history of states per GPU, the verdict over a window
// (idle, held, busy, unknown: fail-safe), the idle dollars in proportion, its JSON both ways and the client.
#include <gtest/gtest.h>

#include "agent/idle.h"
#include "support/fake_http.h"

namespace gm::agent {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000'000;  // unix ms

gpu::DeviceSample sample(std::optional<std::uint32_t> util, std::size_t processes,
                         gpu::DeviceState state = gpu::DeviceState::ok) {
  gpu::DeviceSample s;
  s.state = state;
  s.utilization_pct = util;
  for (std::size_t i = 0; i < processes; ++i) s.processes.push_back(gpu::ProcessSample{});
  return s;
}

IdleDevice device(unsigned index, const gpu::DeviceSample& last) {
  IdleDevice d;
  d.info.index = index;
  d.info.uuid = "GPU-" + std::to_string(index);
  d.info.name = "NVIDIA H100 80GB HBM3";
  d.priced = true;
  d.last = last;
  return d;
}

/// `seconds` one-second intervals of GPU `gpu` in `state` at $3.60/h (1000 micro-dollars a second) from
/// `from_s`.
void book(IdleHistory& h, std::size_t gpu, IdleState state, std::int64_t from_s, std::int64_t seconds) {
  for (std::int64_t i = 1; i <= seconds; ++i) h.add(gpu, state, kT0 + (from_s + i) * 1000, 1000, 1000);
}

TEST(IdleAnswerTest, ClassifiesEachIntervalFailSafe) {
  EXPECT_EQ(classify_idle(sample(0, 0)), IdleState::idle);
  EXPECT_EQ(classify_idle(sample(4, 0)), IdleState::idle);
  EXPECT_EQ(classify_idle(sample(2, 1)), IdleState::idle_held);
  EXPECT_EQ(classify_idle(sample(5, 0)), IdleState::busy);
  EXPECT_EQ(classify_idle(sample(90, 2)), IdleState::busy);
  EXPECT_EQ(classify_idle(sample(std::nullopt, 0)), IdleState::unknown);
  EXPECT_EQ(classify_idle(sample(0, 0, gpu::DeviceState::lost)), IdleState::unknown);
}

TEST(IdleAnswerTest, MergesAStateIntoOneSegmentAndForgetsTheOldest) {
  IdleHistory h(/*keep_ms=*/60'000, /*max_segments=*/3);
  book(h, 0, IdleState::busy, 0, 10);
  book(h, 0, IdleState::idle, 10, 10);
  ASSERT_EQ(h.segments(0).size(), 2u);
  EXPECT_EQ(h.segments(0)[1].start_unix_ms, kT0 + 10'000);
  EXPECT_EQ(h.segments(0)[1].end_unix_ms, kT0 + 20'000);
  EXPECT_EQ(h.segments(0)[1].cost_micros, 10'000);
  book(h, 0, IdleState::idle_held, 20, 1);
  book(h, 0, IdleState::idle, 21, 1);
  EXPECT_EQ(h.segments(0).size(), 3u);  // at most three: the busy one went
  EXPECT_EQ(h.segments(0).front().state, IdleState::idle);
  book(h, 0, IdleState::idle, 22, 100);
  EXPECT_EQ(h.segments(0).size(), 1u);  // older than a minute: gone
  EXPECT_TRUE(h.segments(5).empty());
}

TEST(IdleAnswerTest, EveryGpuIdleForTheWindowIsIdleWithItsDollars) {
  IdleHistory h;
  book(h, 0, IdleState::busy, 0, 100);
  book(h, 0, IdleState::idle, 100, 1800);
  book(h, 1, IdleState::idle, 0, 1900);
  const std::vector<IdleDevice> devices{device(0, sample(0, 0)), device(1, sample(1, 0))};
  const std::int64_t now = kT0 + 1900 * 1000;
  auto a = answer_idle(h, devices, now, 1'800'000, now, 5000);
  EXPECT_EQ(a.verdict, IdleState::idle) << a.reason;
  EXPECT_EQ(idle_exit_code(a.verdict), 0);
  EXPECT_EQ(a.idle_since_unix_ms, std::optional<std::int64_t>(kT0 + 100'000));  // the later of the two GPUs
  EXPECT_EQ(a.history_ms, 1'900'000);
  ASSERT_EQ(a.gpus.size(), 2u);
  EXPECT_EQ(a.gpus[0].idle_ms, 1'800'000);
  EXPECT_EQ(a.gpus[0].busy_ms, 0);
  // 30 minutes at $3.60/h on each GPU: $1.80 each, exactly (the longer segment of GPU 1 in proportion).
  EXPECT_EQ(a.gpus[0].idle_cost_micros, std::optional<MicroUsd>(1'800'000));
  EXPECT_EQ(a.gpus[1].idle_cost_micros, std::optional<MicroUsd>(1'800'000));
  EXPECT_EQ(a.idle_cost_micros, std::optional<MicroUsd>(3'600'000));
  EXPECT_EQ(a.idle_held_cost_micros, std::optional<MicroUsd>(0));
  EXPECT_NE(a.reason.find("every GPU idle"), std::string::npos) << a.reason;
  // A window that reaches into the busy time: busy.
  auto b = answer_idle(h, devices, now, 1'850'000, now, 5000);
  EXPECT_EQ(b.verdict, IdleState::busy);
  EXPECT_EQ(idle_exit_code(b.verdict), 1);
  EXPECT_NE(b.reason.find("GPU 0 busy"), std::string::npos) << b.reason;
}

TEST(IdleAnswerTest, HeldIdleIsNotIdleAndCarriesItsOwnDollars) {
  IdleHistory h;
  book(h, 0, IdleState::idle, 0, 600);
  book(h, 1, IdleState::idle_held, 0, 600);
  const std::vector<IdleDevice> devices{device(0, sample(0, 0)), device(1, sample(0, 1))};
  const std::int64_t now = kT0 + 600'000;
  auto a = answer_idle(h, devices, now, 300'000, now, 5000);
  EXPECT_EQ(a.verdict, IdleState::idle_held);
  EXPECT_EQ(idle_exit_code(a.verdict), 1);
  EXPECT_FALSE(a.idle_since_unix_ms);
  EXPECT_EQ(a.gpus[1].state, IdleState::idle_held);
  EXPECT_EQ(a.gpus[1].state_now, IdleState::idle_held);
  EXPECT_EQ(a.gpus[1].idle_held_cost_micros, std::optional<MicroUsd>(300'000));
  EXPECT_EQ(a.idle_cost_micros, std::optional<MicroUsd>(300'000));
  EXPECT_EQ(a.idle_held_cost_micros, std::optional<MicroUsd>(300'000));
  EXPECT_NE(a.reason.find("GPU 1 idle but held"), std::string::npos) << a.reason;
}

TEST(IdleAnswerTest, UnknownWhenTheHistoryIsShortAGpuUnreadableOrTheCollectorStalled) {
  IdleHistory h;
  book(h, 0, IdleState::idle, 0, 60);
  const std::int64_t now = kT0 + 60'000;
  auto shorter = answer_idle(h, {device(0, sample(0, 0))}, now, 600'000, now, 5000);
  EXPECT_EQ(shorter.verdict, IdleState::unknown);
  EXPECT_EQ(idle_exit_code(shorter.verdict), 3);
  EXPECT_NE(shorter.reason.find("seen the GPUs for"), std::string::npos) << shorter.reason;
  // A GPU that cannot be read is never called idle.
  IdleHistory u;
  book(u, 0, IdleState::idle, 0, 100);
  book(u, 0, IdleState::unknown, 100, 5);
  book(u, 0, IdleState::idle, 105, 5);
  auto unreadable = answer_idle(u, {device(0, sample(0, 0))}, kT0 + 110'000, 60'000, kT0 + 110'000, 5000);
  EXPECT_EQ(unreadable.verdict, IdleState::unknown);
  EXPECT_NE(unreadable.reason.find("could not be read"), std::string::npos) << unreadable.reason;
  // The collector stalled: its last figures are too old to call anything idle.
  auto stalled = answer_idle(h, {device(0, sample(0, 0))}, now + 30'000, 10'000, now, 5000);
  EXPECT_EQ(stalled.verdict, IdleState::unknown);
  EXPECT_NE(stalled.reason.find("stalled"), std::string::npos) << stalled.reason;
  // Busy within the short history is still a definite answer.
  IdleHistory b;
  book(b, 0, IdleState::busy, 0, 10);
  EXPECT_EQ(answer_idle(b, {device(0, sample(50, 1))}, kT0 + 10'000, 600'000, kT0 + 10'000, 5000).verdict,
            IdleState::busy);
  // No GPU: unknown.
  EXPECT_EQ(answer_idle(b, {}, kT0, 1000, kT0, 5000).verdict, IdleState::unknown);
  // Without a price: no dollars, never 0.
  auto unpriced = device(0, sample(0, 0));
  unpriced.priced = false;
  auto np = answer_idle(h, {unpriced}, now, 30'000, now, 5000);
  EXPECT_EQ(np.verdict, IdleState::idle);
  EXPECT_FALSE(np.idle_cost_micros);
  EXPECT_FALSE(np.gpus[0].idle_cost_micros);
}

TEST(IdleAnswerTest, JsonReadsBackAndTheClientTellsWhatWentWrong) {
  IdleHistory h;
  book(h, 0, IdleState::idle_held, 0, 100);
  const std::int64_t now = kT0 + 100'000;
  const auto a = answer_idle(h, {device(0, sample(0, 2))}, now, 60'000, now, 5000);
  const std::string text = idle_answer_json(a);
  auto back = parse_idle_answer(text, "test");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->verdict, IdleState::idle_held);
  EXPECT_EQ(back->for_ms, 60'000);
  EXPECT_EQ(back->gpus.at(0).idle_held_cost_micros, a.gpus.at(0).idle_held_cost_micros);
  EXPECT_EQ(back->gpus.at(0).processes, 2u);
  EXPECT_EQ(back->idle_held_cost_micros, std::optional<MicroUsd>(60'000));

  test::FakeHttpClient http;
  http.answer("http://127.0.0.1:9835/v1/idle?for=60000ms", 200, text);
  auto asked = ask_idle("127.0.0.1:9835", 60'000, 1000, http);
  ASSERT_TRUE(asked) << asked.error().message;
  EXPECT_EQ(asked->verdict, IdleState::idle_held);
  http.answer("http://old:9835/v1/idle?for=60000ms", 404, "not found");
  auto old = ask_idle("http://old:9835/", 60'000, 1000, http);
  ASSERT_FALSE(old);
  EXPECT_NE(old.error().message.find("older gpumeter agent"), std::string::npos) << old.error().message;
  auto down = ask_idle("http://down:1", 60'000, 1000, http);
  ASSERT_FALSE(down);
  EXPECT_NE(down.error().message.find("did not answer"), std::string::npos) << down.error().message;
  http.answer("http://garbage:9835/v1/idle?for=60000ms", 200, "{\"verdict\": \"maybe\"}");
  auto garbage = ask_idle("garbage:9835", 60'000, 1000, http);
  ASSERT_FALSE(garbage);
  EXPECT_NE(garbage.error().message.find("not an idleness answer"), std::string::npos)
      << garbage.error().message;
}

}  // namespace
}  // namespace gm::agent
