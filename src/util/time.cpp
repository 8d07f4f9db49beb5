#include "util/time.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>

namespace gm::util {

std::string iso8601_utc(std::int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::optional<std::int64_t> unix_ms_from_utc(int year, int month, int day, int hour, int minute, int second) {
  if (year < 1970 || year > 9999 || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 ||
      minute > 59 || second > 60)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  return static_cast<std::int64_t>(timegm(&tm)) * 1000;
}

std::int64_t month_start_unix_ms(std::int64_t unix_ms, int months_ahead) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  tm.tm_mday = 1;
  tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
  tm.tm_mon += months_ahead;
  return static_cast<std::int64_t>(timegm(&tm)) * 1000;
}

std::optional<long> days_since_date(std::string_view date, std::int64_t now_unix_ms) {
  int y = 0;
  unsigned m = 0, d = 0;
  const std::string text(date);
  if (std::sscanf(text.c_str(), "%d-%u-%u", &y, &m, &d) != 3) return std::nullopt;
  const std::chrono::year_month_day ymd{std::chrono::year{y}, std::chrono::month{m}, std::chrono::day{d}};
  if (!ymd.ok()) return std::nullopt;
  const auto today = std::chrono::floor<std::chrono::days>(
      std::chrono::sys_time<std::chrono::milliseconds>(std::chrono::milliseconds(now_unix_ms)));
  return static_cast<long>((today - std::chrono::sys_days{ymd}).count());
}

}  // namespace gm::util
