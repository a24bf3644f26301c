// Fuzz checks of the service's configuration readers: the TOML file and the timing profile JSON.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "engine/config.h"
#include "engine/timing_model.h"
#include "service/config.h"
#include "tests/fuzz/fuzz_checks.h"
#include "tests/fuzz/fuzz_util.h"

namespace mocker::fuzz {
namespace {

std::string_view textOf(Input input) {
  return {reinterpret_cast<const char*>(input.data()), input.size()};
}

}  // namespace

void checkConfigToml(Input input) {
  service::KeyOrigins origins;
  auto parsed = service::parseServiceConfigOver(service::ServiceConfig{}, textOf(input),
                                                "fuzz.toml", origins);
  if (!parsed) {
    MOCKER_FUZZ_REQUIRE(!parsed.error().message.empty());
    return;
  }
  // finishServiceConfig would read the timing profile file the input names (any path, even a
  // device); the check stays a pure function of its input, so that key is dropped here.
  parsed->timing_profile_path.clear();
  const auto config = service::finishServiceConfig(std::move(*parsed), origins);
  if (!config) {
    MOCKER_FUZZ_REQUIRE(!config.error().message.empty());
    return;
  }
  const std::string dumped = service::dumpServiceConfig(*config);
  const auto again = service::parseServiceConfig(dumped, "dump.toml");
  MOCKER_FUZZ_REQUIRE(again.has_value());
  MOCKER_FUZZ_REQUIRE(*again == *config);
}

void checkTimingProfile(Input input) {
  auto profile = service::parseTimingProfile(textOf(input), "fuzz.json");
  if (!profile) {
    MOCKER_FUZZ_REQUIRE(!profile.error().message.empty());
    return;
  }
  // An accepted profile drives the interpolated timing model (the sanitizers watch the
  // interpolation; the values themselves may be non-finite for a pathological profile).
  const engine::EngineConfig engine_config{.timing_model = engine::TimingModelKind::Interpolated,
                                           .timing_profile = std::move(*profile)};
  if (!engine::validateEngineConfig(engine_config)) return;
  const engine::TimingModel model(engine_config);
  for (std::uint64_t x : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{100},
                          std::uint64_t{1} << 20, ~std::uint64_t{0}}) {
    (void)model.prefillMs(1, x, x / 2);
    (void)model.decodeMs(1, x, x, x);
  }
}

}  // namespace mocker::fuzz
