// The table of fuzz targets (fuzz_checks.h).
#include "tests/fuzz/fuzz_checks.h"

#include <array>

namespace mocker::fuzz {

std::span<const FuzzTarget> fuzzTargets() {
  static constexpr std::array kTargets{
      FuzzTarget{"azure_fuzz", &checkAzure},
      FuzzTarget{"cli_text_fuzz", &checkCliText},
      FuzzTarget{"client_fuzz", &checkClientMessage},
      FuzzTarget{"config_toml_fuzz", &checkConfigToml},
      FuzzTarget{"flat_json_fuzz", &checkFlatJson},
      FuzzTarget{"fpm_fuzz", &checkFpm},
      FuzzTarget{"index_query_fuzz", &checkIndexQuery},
      FuzzTarget{"kv_events_fuzz", &checkKvEvents},
      FuzzTarget{"kv_replay_fuzz", &checkKvReplay},
      FuzzTarget{"mooncake_fuzz", &checkMooncake},
      FuzzTarget{"openai_request_fuzz", &checkOpenAiRequest},
      FuzzTarget{"mooncake_delta_fuzz", &checkMooncakeDelta},
      FuzzTarget{"agentic_fuzz", &checkAgentic},
      FuzzTarget{"sequencer_fuzz", &checkSequencer},
      FuzzTarget{"timing_profile_fuzz", &checkTimingProfile},
  };
  return kTargets;
}

}  // namespace mocker::fuzz
