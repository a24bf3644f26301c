#include "engine/timing_model.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mocker::engine {
namespace {

// Polynomial reference values.
TEST(TimingModelTest, PolynomialReferenceValues) {
  const TimingModel m(EngineConfig{});
  EXPECT_DOUBLE_EQ(m.prefillMs(1, 8, 0), 16.6229144639296);
  EXPECT_DOUBLE_EQ(m.prefillMs(1, 512, 0), 24.3857036156416);
  EXPECT_DOUBLE_EQ(m.prefillMs(2, 512, 0), 32.4907119025664);
  EXPECT_DOUBLE_EQ(m.prefillMs(1, 8192, 0), 169.1369184042496);
  EXPECT_EQ(m.prefillMs(0, 8, 0), 0.0);
  EXPECT_EQ(m.prefillMs(1, 8, 8), 0.0);
  EXPECT_DOUBLE_EQ(m.decodeMs(1, 0, 1, 100), 5.74);
  EXPECT_DOUBLE_EQ(m.decodeMs(1, 50, 1, 100), 26.31);
  EXPECT_DOUBLE_EQ(m.decodeMs(1, 100, 1, 100), 34.01);
  EXPECT_DOUBLE_EQ(m.decodeMs(1, 500, 1, 100), 34.01);  // u clamped to 1
  EXPECT_DOUBLE_EQ(m.decodeMs(1, 0, 1, 0), 34.01);      // total 0 ⇒ u = 1
  EXPECT_EQ(m.decodeMs(0, 10, 1, 100), 0.0);
}

EngineConfig interpolated() {
  EngineConfig c;
  c.timing_model = TimingModelKind::Interpolated;
  c.timing_profile = TimingProfile{
      .prefill_isl = {100, 200, 400},
      .prefill_ttft_ms = {10, 20, 30},
      .decode_active_kv_tokens = {0, 1000},
      .decode_context_length = {100, 300},
      .decode_itl = {{2, 4}, {6, 8}},
  };
  return c;
}

TEST(TimingModelTest, InterpolatedLinearAndBilinearWithExtrapolation) {
  const EngineConfig c = interpolated();
  ASSERT_TRUE(validateEngineConfig(c).has_value());
  const TimingModel m(c);
  EXPECT_DOUBLE_EQ(m.prefillMs(1, 150, 0), 15.0);
  EXPECT_DOUBLE_EQ(m.prefillMs(2, 150, 50), 20.0);  // x = 2·100 = 200
  EXPECT_DOUBLE_EQ(m.prefillMs(1, 800, 0), 50.0);   // extrapolated from the last segment
  EXPECT_DOUBLE_EQ(m.prefillMs(1, 10, 0), 1.0);     // extrapolated below
  EXPECT_DOUBLE_EQ(m.decodeMs(1, 500, 200, 0), 5.0);
  EXPECT_DOUBLE_EQ(m.decodeMs(1, 2000, 300, 0), 12.0);
  EXPECT_DOUBLE_EQ(m.decodeMs(1, 0, 0, 0), 1.0);  // extrapolates to 1.0 — and clamps at >= 1
}

TEST(TimingModelTest, FixedModel) {
  EngineConfig c;
  c.timing_model = TimingModelKind::Fixed;
  c.fixed_prefill_ms = 3;
  c.fixed_decode_ms = 2;
  const TimingModel m(c);
  EXPECT_EQ(m.prefillMs(4, 100, 0), 3.0);
  EXPECT_EQ(m.prefillMs(4, 100, 100), 0.0);
  EXPECT_EQ(m.decodeMs(7, 1, 1, 1), 2.0);
  EXPECT_EQ(m.decodeMs(0, 1, 1, 1), 0.0);
}

}  // namespace
}  // namespace mocker::engine
