// The fit's prior (tools/calibrate/fit.h): the distance of a value from its prior centre in prior
// widths and the penalty, against hand-computed values; every parameter has a prior.
#include "tools/calibrate/fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/roofline.h"

namespace mocker::calibrate {
namespace {

TEST(FitPriorTest, DistanceInPriorWidthsHandComputed) {
  const FitParameter log_prior{.key = "a", .prior_center = 0.75, .prior_width = 0.15};
  EXPECT_NEAR(priorZ(log_prior, 0.75), 0.0, 1e-15);
  EXPECT_NEAR(priorZ(log_prior, 0.75 * std::exp(0.15)), 1.0, 1e-12);
  EXPECT_NEAR(priorZ(log_prior, 0.75 * std::exp(-0.3)), -2.0, 1e-12);
  // A bound of 0 under a log prior: the value counts as centre / 1000, a finite distance.
  const FitParameter overhead{.key = "b", .prior_center = 1.0, .prior_width = std::log(2.0)};
  EXPECT_NEAR(priorZ(overhead, 0.0), std::log(1e-3) / std::log(2.0), 1e-12);  // −9.966
  // A centre of 0 (the client terms): linear, z = value / width.
  const FitParameter linear{.key = "c", .prior_center = 0.0, .prior_width = 10.0};
  EXPECT_DOUBLE_EQ(priorZ(linear, 25.0), 2.5);

  // weight · Σ z² = 2 · (1 + 4 + 6.25) = 22.5.
  const std::vector<FitParameter> params{log_prior, log_prior, linear};
  const std::vector<double> values{0.75 * std::exp(0.15), 0.75 * std::exp(-0.3), 25.0};
  EXPECT_NEAR(priorPenalty(params, values, 2.0), 22.5, 1e-9);
  EXPECT_EQ(priorPenalty(params, values, 0.0), 0.0);
}

TEST(FitPriorTest, EveryParameterHasAPriorAtItsDefault) {
  std::size_t roofline = 0;
  for (const FitParameter& p : allFitParameters()) {
    EXPECT_GT(p.prior_width, 0.0) << p.key;
    EXPECT_EQ(p.prior_center, p.initial) << p.key;
    if (!isRooflineKey(p.key)) continue;
    ++roofline;
    const engine::RooflineCoefficientInfo* c =
        engine::findRooflineCoefficient(std::string_view(p.key).substr(9));
    ASSERT_NE(c, nullptr) << p.key;
    EXPECT_EQ(p.prior_center, c->default_value) << p.key;
    EXPECT_GT(p.prior_center, 0.0) << p.key << ": a log prior needs a positive centre";
  }
  EXPECT_EQ(roofline, engine::kNumRooflineCoefficients);
}

}  // namespace
}  // namespace mocker::calibrate
