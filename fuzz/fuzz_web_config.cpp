// libFuzzer target: the agent's --web-config file (exporter-toolkit YAML subset: TLS files, basic-auth
// users). Any bytes: an error naming the file and line, or a config of absolute paths and bcrypt hashes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/agent.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = gm::agent::parse_web_config(text, "web.yml", "/etc/gpumeter");
  if (!c) {
    check(c.error().message.find("web.yml") != std::string::npos);
    return 0;
  }
  for (const auto& [user, hash] : c->basic_auth_users) check(hash.rfind("$2", 0) == 0);
  for (const std::string* f : {&c->cert_file, &c->key_file}) check(f->empty() || f->front() == '/');
  return 0;
}
