#include <gtest/gtest.h>

#include "util/csv.h"
#include "util/embedded.h"
#include "util/money.h"
#include "util/result.h"
#include "util/table.h"
#include "util/units.h"

namespace gm {
namespace {

TEST(UtilTest, DurationParsing) {
  EXPECT_EQ(*util::parse_duration_ms("90"), 90'000);
  EXPECT_EQ(*util::parse_duration_ms("500ms"), 500);
  EXPECT_EQ(*util::parse_duration_ms("15m"), 900'000);
  EXPECT_EQ(*util::parse_duration_ms("1h30m"), 5'400'000);
  EXPECT_EQ(*util::parse_duration_ms("7d"), 7 * 86'400'000LL);
  EXPECT_FALSE(util::parse_duration_ms("abc").ok());
  EXPECT_FALSE(util::parse_duration_ms("5x").ok());
  EXPECT_FALSE(util::parse_duration_ms("").ok());
}

TEST(UtilTest, PercentParsing) {
  EXPECT_DOUBLE_EQ(*util::parse_percent("80%"), 80);
  EXPECT_DOUBLE_EQ(*util::parse_percent("50"), 50);
  EXPECT_FALSE(util::parse_percent("150%").ok());
  EXPECT_FALSE(util::parse_percent("-1%").ok());
}

TEST(UtilTest, MoneyIsExactInIntegers) {
  // $98.32/h for one hour is exactly $98.32
  EXPECT_EQ(util::cost_for_ms(util::usd_to_micros(98.32), 3'600'000), 98'320'000);
  EXPECT_EQ(util::cost_for_ms(util::usd_to_micros(3600), 1000), 1'000'000);
  EXPECT_EQ(util::format_usd(1234.5), "$1,234.50");
  EXPECT_EQ(util::format_usd(0.5), "$0.500");
  EXPECT_EQ(util::format_usd(0.0042), "$0.004200");
  EXPECT_EQ(util::format_usd(2.4e-8), "$0.000000024");  // a kernel's cost keeps two significant digits
  EXPECT_EQ(util::format_usd(1.234e-7), "$0.00000012");
  EXPECT_EQ(util::format_usd(1e-15), "<$0.000000000001");
}

TEST(UtilTest, MoneyParsesAndWritesExactly) {
  EXPECT_EQ(*util::parse_usd_micros("12"), 12'000'000);
  EXPECT_EQ(*util::parse_usd_micros("12.5"), 12'500'000);
  EXPECT_EQ(*util::parse_usd_micros("$0.25"), 250'000);
  EXPECT_EQ(*util::parse_usd_micros(".5"), 500'000);
  EXPECT_EQ(*util::parse_usd_micros("0.1"), 100'000);  // exact, where 0.1 as a double is not
  EXPECT_EQ(*util::parse_usd_micros("0.0000005"), 1);  // the seventh decimal rounds half up
  EXPECT_EQ(*util::parse_usd_micros("0.00000049"), 0);
  for (const char* bad : {"", "$", ".", "-1", "1e3", "12abc", "1.2.3", "99999999999999999999"}) {
    auto r = util::parse_usd_micros(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind, ErrorKind::usage);
    EXPECT_NE(r.error().message.find(std::string("'") + bad + "'"), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(util::usd_decimal(12'500'000), "12.5");
  EXPECT_EQ(util::usd_decimal(42), "0.000042");
  EXPECT_EQ(util::usd_decimal(-3'000'000), "-3");
  EXPECT_EQ(util::usd_decimal(0), "0");
  EXPECT_EQ(util::usd_decimal(3'000'000, true), "3.000000");
  EXPECT_EQ(util::format_usd(1.5, true), "+$1.50");
  EXPECT_EQ(util::format_usd(-1.5, true), "-$1.50");
  EXPECT_EQ(util::format_micros(3'600'000), "$3.60");
  EXPECT_EQ(util::format_usd_or(std::nullopt), "-");
  EXPECT_EQ(util::format_usd_or(std::nullopt, "n/a"), "n/a");
  EXPECT_EQ(util::format_usd_or(2.0), "$2.00");
}

TEST(UtilTest, CsvQuotedFieldsAndLineNumbers) {
  auto t = util::parse_csv("a,b\n1,\"x, \"\"y\"\"\"\n\n2,z\n", "t.csv");
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->rows.size(), 2u);
  EXPECT_EQ(t->rows[0].fields[1], "x, \"y\"");
  EXPECT_EQ(t->rows[1].line, 4u);
  auto bad = util::parse_csv("a,b\n1,2,3\n", "bad.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad.csv:2"), std::string::npos);
}

TEST(UtilTest, SuggestNames) {
  std::vector<std::string> names{"H100 SXM 80GB", "A100 SXM 40GB", "L4 24GB"};
  EXPECT_NE(util::suggest_names("H10", names).find("H100"), std::string::npos);
}

TEST(UtilTest, TableAlignsColumns) {
  util::TextTable t;
  t.header({"gpu", "$/h"}, {util::TextTable::Align::left, util::TextTable::Align::right});
  t.row({"H100", "$2.50"});
  t.row({"L4", "$10.00"});
  const auto s = t.render();
  EXPECT_NE(s.find("H100   $2.50"), std::string::npos) << s;
  EXPECT_EQ(util::shorten_middle("abcdefghijklmnopqrstuvwxyz", 10).size(), 12u);  // 9 chars + 3-byte ellipsis
}

TEST(UtilTest, EmbeddedDataIsCompiledIn) {
  EXPECT_FALSE(util::embedded_files().empty());
}

}  // namespace
}  // namespace gm
