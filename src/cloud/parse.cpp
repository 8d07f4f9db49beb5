// Parsers of the metadata services' documented answers, the preemption mode and the base URL.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <ctime>
#include <fstream>

#include "cloud/cloud.h"
#include "util/enum_text.h"
#include "util/json_in.h"
#include "util/time.h"

namespace gm::cloud {
namespace {

std::string_view trim_ws(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string first_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(trim_ws(line));
}

/// Digits at `s[pos..pos+n)` as a number, or -1.
int digits(std::string_view s, std::size_t pos, std::size_t n) {
  if (pos + n > s.size()) return -1;
  int v = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

/// The body as a JSON object, or an error naming what it is about.
Result<nlohmann::json> metadata_object(std::string_view body, std::string_view what) {
  auto j = util::json_parse(body, what);
  if (!j || !j->is_object())
    return make_error(fmt::format("{}: not a JSON object: '{}'", what, std::string(body.substr(0, 80))));
  return j;
}

std::optional<std::string> string_field(const nlohmann::json& j, const char* key) {
  return util::json_string(j, key);
}

}  // namespace

constexpr util::EnumText<CloudProvider> kCloudProviders[] = {
    {CloudProvider::aws, "aws"}, {CloudProvider::gcp, "gcp"}, {CloudProvider::azure, "azure"}};

std::string_view provider_name(CloudProvider provider) {
  return util::enum_text(kCloudProviders, provider, "aws");
}

Result<PreemptionMode> parse_preemption_mode(std::string_view text) {
  PreemptionMode m;
  if (text == "auto") return m;
  if (text == "off") {
    m.off = true;
    return m;
  }
  if (auto p = util::enum_from_text(kCloudProviders, text)) {
    m.provider = *p;
    return m;
  }
  return make_error(ErrorKind::usage, fmt::format("--preemption '{}': expected auto, aws, gcp, azure or off",
                                                  std::string(text)));
}

std::optional<CloudProvider> detect_cloud_provider(const std::string& sys_root) {
  const std::string dir = sys_root + "/class/dmi/id/";
  const std::string vendor = first_line_of(dir + "sys_vendor");
  const std::string product = first_line_of(dir + "product_name");
  if (vendor.find("Amazon EC2") != std::string::npos) return CloudProvider::aws;
  if (vendor == "Google" || product == "Google Compute Engine") return CloudProvider::gcp;
  // Azure VMs carry this fixed chassis asset tag (Hyper-V elsewhere does not).
  if (vendor == "Microsoft Corporation" &&
      first_line_of(dir + "chassis_asset_tag") == "7783-7084-3265-9085-8269-3286-77")
    return CloudProvider::azure;
  return std::nullopt;
}

Result<std::string> metadata_base_url(const std::optional<std::string>& flag_url,
                                      const std::optional<std::string>& env_url) {
  std::string url = "http://169.254.169.254";
  std::string source = "--metadata-url";
  if (flag_url) {
    url = *flag_url;
  } else if (env_url && !env_url->empty()) {
    url = *env_url;
    source = "$GPUMETER_METADATA_URL";
  }
  while (!url.empty() && url.back() == '/') url.pop_back();
  const bool http = url.rfind("http://", 0) == 0;
  const std::string host = http ? url.substr(7) : std::string();
  if (!http || host.empty() || host.find('/') != std::string::npos ||
      host.find_first_of(" \t\r\n?#@") != std::string::npos)
    return make_error(
        ErrorKind::usage,
        fmt::format("{} '{}': expected http://HOST[:PORT] (the providers' paths are added)", source, url));
  return url;
}

std::optional<std::int64_t> parse_iso8601_ms(std::string_view s) {
  s = trim_ws(s);
  // YYYY-MM-DDTHH:MM:SS[.fff][Z|+hh:mm|-hh:mm]
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      s[13] != ':' || s[16] != ':')
    return std::nullopt;
  auto base = util::unix_ms_from_utc(digits(s, 0, 4), digits(s, 5, 2), digits(s, 8, 2), digits(s, 11, 2),
                                     digits(s, 14, 2), digits(s, 17, 2));
  if (!base || digits(s, 0, 4) < 0) return std::nullopt;
  std::size_t pos = 19;
  std::int64_t frac_ms = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int scale = 100, n = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      frac_ms += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
      ++n;
    }
    if (n == 0) return std::nullopt;
  }
  std::int64_t offset_ms = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    const int hh = digits(s, pos + 1, 2), mm = digits(s, pos + 4, 2);
    if (hh < 0 || mm < 0 || s.size() < pos + 6 || s[pos + 3] != ':' || hh > 23 || mm > 59)
      return std::nullopt;
    offset_ms = (hh * 60 + mm) * 60'000LL * (s[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return std::nullopt;  // a time without a zone is ambiguous
  }
  if (pos != s.size()) return std::nullopt;
  return *base + frac_ms - offset_ms;
}

std::optional<std::int64_t> parse_rfc1123_ms(std::string_view s) {
  s = trim_ws(s);
  // "Mon, 19 Sep 2016 18:29:47 GMT"
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  if (s.size() != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' ||
      s[19] != ':' || s[22] != ':' || s.substr(25) != " GMT")
    return std::nullopt;
  int month = 0;
  for (int i = 0; i < 12; ++i)
    if (s.substr(8, 3) == kMonths[i]) month = i + 1;
  if (month == 0) return std::nullopt;
  const int day = digits(s, 5, 2), year = digits(s, 12, 4), hh = digits(s, 17, 2), mm = digits(s, 20, 2),
            ss = digits(s, 23, 2);
  if (day < 0 || year < 0 || hh < 0 || mm < 0 || ss < 0) return std::nullopt;
  return util::unix_ms_from_utc(year, month, day, hh, mm, ss);
}

std::string format_iso8601(std::int64_t unix_ms) {
  return util::iso8601_utc(unix_ms);
}

Result<CloudNotice> parse_aws_instance_action(std::string_view body) {
  GM_TRY(auto j, metadata_object(body, "AWS spot/instance-action"));
  auto action = string_field(j, "action");
  auto time = string_field(j, "time");
  if (!action || (*action != "terminate" && *action != "stop" && *action != "hibernate"))
    return make_error("AWS spot/instance-action: 'action' is not terminate, stop or hibernate");
  if (!time) return make_error("AWS spot/instance-action: no 'time'");
  auto at = parse_iso8601_ms(*time);
  if (!at) return make_error("AWS spot/instance-action: 'time' is not an ISO 8601 UTC time: '" + *time + "'");
  CloudNotice n;
  n.provider = CloudProvider::aws;
  n.stop = true;
  n.kind = *action;
  n.id = "instance-action " + *action + " " + *time;
  n.deadline_unix_ms = at;
  n.detail = fmt::format("AWS spot interruption notice: {} at {}", *action, format_iso8601(*at));
  return n;
}

Result<CloudNotice> parse_aws_rebalance(std::string_view body) {
  GM_TRY(auto j, metadata_object(body, "AWS events/recommendations/rebalance"));
  auto time = string_field(j, "noticeTime");
  if (!time) return make_error("AWS events/recommendations/rebalance: no 'noticeTime'");
  auto at = parse_iso8601_ms(*time);
  if (!at)
    return make_error("AWS events/recommendations/rebalance: 'noticeTime' is not an ISO 8601 UTC time");
  CloudNotice n;
  n.provider = CloudProvider::aws;
  n.kind = "rebalance";
  n.id = "rebalance " + *time;
  n.detail = fmt::format(
      "AWS rebalance recommendation since {}: this spot instance is at elevated risk of "
      "interruption",
      format_iso8601(*at));
  return n;
}

Result<bool> parse_gcp_preempted(std::string_view body) {
  const auto t = trim_ws(body);
  if (t == "TRUE") return true;
  if (t == "FALSE") return false;
  return make_error(
      fmt::format("GCP instance/preempted: expected TRUE or FALSE, got '{}'", std::string(t.substr(0, 80))));
}

Result<std::optional<CloudNotice>> parse_gcp_maintenance(std::string_view body) {
  const auto t = trim_ws(body);
  if (t == "NONE") return std::optional<CloudNotice>();
  if (t.empty() || t.size() > 64 || std::any_of(t.begin(), t.end(), [](char c) {
        return !(std::isupper(static_cast<unsigned char>(c)) || c == '_');
      }))
    return make_error(fmt::format("GCP instance/maintenance-event: expected NONE or an event name, got '{}'",
                                  std::string(t.substr(0, 80))));
  CloudNotice n;
  n.provider = CloudProvider::gcp;
  n.kind = "maintenance";
  n.id = "maintenance " + std::string(t);
  n.detail = fmt::format("GCP host maintenance event {}", std::string(t));
  return std::optional<CloudNotice>(n);
}

Result<std::vector<CloudNotice>> parse_azure_scheduled_events(std::string_view body,
                                                              const std::optional<std::string>& vm_name) {
  GM_TRY(auto j, metadata_object(body, "Azure scheduledevents"));
  const nlohmann::json* events = util::json_array(j, "Events");
  if (!events) return make_error("Azure scheduledevents: no 'Events' array");
  std::vector<CloudNotice> out;
  for (const auto& e : *events) {
    if (!e.is_object()) return make_error("Azure scheduledevents: an event is not an object");
    auto type = string_field(e, "EventType");
    auto id = string_field(e, "EventId");
    if (!type || !id) return make_error("Azure scheduledevents: an event without EventType or EventId");
    if (auto status = string_field(e, "EventStatus"); status && *status == "Canceled") continue;
    if (vm_name) {
      const nlohmann::json* res = util::json_array(e, "Resources");
      bool ours = !res || res->empty();
      if (res)
        for (const auto& r : *res)
          if (util::json_string(&r) == *vm_name) ours = true;
      if (!ours) continue;
    }
    CloudNotice n;
    n.provider = CloudProvider::azure;
    n.kind = *type;
    n.stop = *type == "Preempt" || *type == "Terminate";
    n.id = "scheduledevent " + *id;
    if (auto nb = string_field(e, "NotBefore"); nb && !nb->empty())
      n.deadline_unix_ms = parse_rfc1123_ms(*nb);
    n.detail = fmt::format("Azure scheduled event {}{}", *type,
                           n.deadline_unix_ms ? " not before " + format_iso8601(*n.deadline_unix_ms) : "");
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace gm::cloud
