// gpumeter's own metric names are a contract (docs/agent.md "Metric stability"): dashboards, alerts and the
// fleet report query them. A name or unit (the unit is part of the name) that changes without an entry in
// tests/data/metric_names.tsv fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "support/support.h"

namespace gm {
namespace {

/// Every "gpumeter_..." string literal of the serializers (src/**/exposition*.cpp).
std::set<std::string> exported_names() {
  std::set<std::string> out;
  const std::regex literal(R"re("(gpumeter_[a-z0-9_]+)")re");
  for (const auto& e : std::filesystem::recursive_directory_iterator(test::source_dir() + "/src")) {
    const std::string file = e.path().filename().string();
    if (!e.is_regular_file() || !file.starts_with("exposition") || e.path().extension() != ".cpp") continue;
    const std::string text = test::read_file(e.path().string());
    for (std::sregex_iterator it(text.begin(), text.end(), literal), end; it != end; ++it) out.insert((*it)[1]);
  }
  return out;
}

/// name -> status from the checked-in list.
std::map<std::string, std::string> listed_names() {
  std::map<std::string, std::string> out;
  std::istringstream in(test::read_file(test::source_dir() + "/tests/data/metric_names.tsv"));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, status;
    std::getline(fields, name, '\t');
    std::getline(fields, status, '\t');
    out[name] = status;
  }
  return out;
}

TEST(MetricNamesTest, ExportedNamesMatchTheStabilityList) {
  const auto exported = exported_names();
  const auto listed = listed_names();
  ASSERT_GE(exported.size(), 30u) << "the serializer was not found under " << test::source_dir();
  for (const auto& name : exported) {
    auto it = listed.find(name);
    EXPECT_TRUE(it != listed.end() && it->second != "removed")
        << name << " is exported but not listed as stable or deprecated in tests/data/metric_names.tsv: a new "
        << "metric is added there; a renamed one (or one whose unit changed) keeps the old name exported as "
        << "deprecated for two minor releases (docs/agent.md)";
  }
  for (const auto& [name, status] : listed) {
    EXPECT_TRUE(status == "stable" || status == "deprecated" || status == "removed") << name << ": " << status;
    if (status == "removed")
      EXPECT_FALSE(exported.count(name)) << name << " is listed as removed but still exported";
    else
      EXPECT_TRUE(exported.count(name)) << name << " (" << status << ") is no longer exported: mark it deprecated "
                                        << "(and keep exporting it) or, after its deprecation period, removed";
  }
}

}  // namespace
}  // namespace gm
