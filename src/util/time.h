#pragma once
// Calendar time in UTC: ISO 8601 text, civil dates to unix time, and the calendar-period math the ledger's
// budgets, the FOCUS export and `doctor` share.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gm::util {

/// "2017-09-18T08:22:00Z" (seconds; the milliseconds dropped).
std::string iso8601_utc(std::int64_t unix_ms);

/// Unix milliseconds of a UTC civil time; nullopt when the year (1970..9999), month
/// or day is out of range or an hour, minute or second too large.
std::optional<std::int64_t> unix_ms_from_utc(int year, int month, int day, int hour, int minute, int second);

/// Midnight UTC of the first day of the month `unix_ms` falls in, `months_ahead` months later.
std::int64_t month_start_unix_ms(std::int64_t unix_ms, int months_ahead = 0);

/// Whole days from the date "YYYY-MM-DD" (UTC midnight) to the day of `now_unix_ms`; nullopt when the text is
/// not such a date.
std::optional<long> days_since_date(std::string_view date, std::int64_t now_unix_ms);

}  // namespace gm::util
