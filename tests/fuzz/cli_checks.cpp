// Fuzz checks of the small text parsers behind command-line values: `mocker index --worker`,
// config flags (setConfigValue), per-rank endpoints and Azure timestamps.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "base/endpoint.h"
#include "service/config.h"
#include "tests/fuzz/fuzz_checks.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/index/index_service.h"
#include "tools/replay/azure_trace.h"

namespace mocker::fuzz {

void checkCliText(Input input) {
  if (input.size() < 2) return;
  const std::uint8_t which = input[0];
  const std::uint8_t arg = input[1];
  const std::string_view text(reinterpret_cast<const char*>(input.data() + 2), input.size() - 2);
  switch (which % 4) {
    case 0: {
      const auto workers = index::parseWorkerSpec(text);
      if (!workers) {
        MOCKER_FUZZ_REQUIRE(!workers.error().message.empty());
        break;
      }
      MOCKER_FUZZ_REQUIRE(!workers->empty() && workers->size() <= 1024);
      for (const index::WorkerEndpoint& w : *workers) MOCKER_FUZZ_REQUIRE(!w.events.empty());
      break;
    }
    case 1: {
      // One key (chosen by `arg`) set from the text, then validated and dumped: a config the
      // flags produce and validation accepts must dump to TOML that parses back equal.
      static const std::vector<std::string> keys = service::configKeys();
      service::ServiceConfig config;
      const auto set = service::setConfigValue(config, keys[arg % keys.size()], text);
      if (!set) {
        MOCKER_FUZZ_REQUIRE(!set.error().message.empty());
        break;
      }
      config.timing_profile_path.clear();  // no file reads (see checkConfigToml)
      const auto finished = service::finishServiceConfig(config, {});
      if (!finished) break;
      const std::string dumped = service::dumpServiceConfig(*finished);
      const auto again = service::parseServiceConfig(dumped, "d");
      if (!again) {
        std::fprintf(stderr, "key %s: the dump does not parse back: %s\n%s\n",
                     keys[arg % keys.size()].c_str(), again.error().message.c_str(),
                     dumped.c_str());
      }
      MOCKER_FUZZ_REQUIRE(again.has_value());
      if (!(*again == *finished)) {
        std::fprintf(stderr, "key %s = '%.*s': the dump parses back different:\n%s\n",
                     keys[arg % keys.size()].c_str(), static_cast<int>(text.size()), text.data(),
                     dumped.c_str());
      }
      MOCKER_FUZZ_REQUIRE(*again == *finished);
      break;
    }
    case 2: {
      const auto endpoint = offsetEndpoint(text, arg);
      if (!endpoint) MOCKER_FUZZ_REQUIRE(!endpoint.error().message.empty());
      if (endpoint && arg == 0) MOCKER_FUZZ_REQUIRE(*endpoint == text);
      break;
    }
    case 3: {
      const auto ticks = replay::parseAzureTimestamp(text);
      if (!ticks) MOCKER_FUZZ_REQUIRE(!ticks.error().message.empty());
      break;
    }
  }
}

}  // namespace mocker::fuzz
