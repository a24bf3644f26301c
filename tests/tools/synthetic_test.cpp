#include "tools/replay/synthetic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tools/replay/random.h"

namespace mocker::replay {
namespace {

using ::testing::HasSubstr;

TEST(SplitMix64Test, MatchesReferenceOutputForSeedZero) {
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220'A839'7B1D'CDAFull);
  EXPECT_EQ(rng.next(), 0x6E78'9E6A'A1B9'65F4ull);
  EXPECT_EQ(rng.next(), 0x06C4'5D18'8009'454Full);
}

TEST(SplitMix64Test, UniformIndexStaysInRangeAndCoversIt) {
  SplitMix64 rng(3);
  std::vector<int> hits(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const std::uint64_t k = rng.uniformIndex(7);
    ASSERT_LT(k, 7u);
    ++hits[k];
  }
  for (int h : hits) EXPECT_NEAR(h, 1000, 150);
}

struct Moments {
  double mean = 0;
  double variance = 0;
};

template <typename F>
Moments moments(int n, F sample) {
  std::vector<double> xs(static_cast<std::size_t>(n));
  double sum = 0;
  for (double& x : xs) sum += (x = sample());
  Moments m;
  m.mean = sum / n;
  for (const double x : xs) m.variance += (x - m.mean) * (x - m.mean) / n;
  return m;
}

TEST(SamplersTest, NormalMeanAndVariance) {
  SplitMix64 rng(42);
  const Moments m = moments(100'000, [&] { return sampleNormal(rng, 10.0, 3.0); });
  EXPECT_NEAR(m.mean, 10.0, 0.05);
  EXPECT_NEAR(m.variance, 9.0, 0.2);
}

TEST(SamplersTest, ExponentialMeanAndVariance) {
  SplitMix64 rng(7);
  const Moments m = moments(100'000, [&] { return sampleExponential(rng, 50.0); });
  EXPECT_NEAR(m.mean, 50.0, 1.0);
  EXPECT_NEAR(m.variance, 2500.0, 100.0);
}

TEST(SamplersTest, GammaMeanAndVarianceForShapesAboveAndBelowOne) {
  for (const double shape : {0.3, 1.0, 4.0}) {
    SplitMix64 rng(11);
    const double scale = 2.0;
    const Moments m = moments(100'000, [&] { return sampleGamma(rng, shape, scale); });
    EXPECT_NEAR(m.mean, shape * scale, 0.03 * shape * scale) << "shape " << shape;
    EXPECT_NEAR(m.variance, shape * scale * scale, 0.06 * shape * scale * scale)
        << "shape " << shape;
  }
}

SyntheticSpec baseSpec() {
  return SyntheticSpec{.request_count = 5,
                       .input_tokens = {.mean = 1000, .stddev = 200},
                       .output_tokens = {.mean = 100, .stddev = 20},
                       .arrival = {.kind = ArrivalKind::Poisson, .rate_per_s = 10},
                       .block_size = 512,
                       .seed = 1};
}

TEST(SyntheticWorkloadTest, PinnedFirstRowsForSeedOne) {
  auto r = generateSyntheticWorkload(baseSpec());
  ASSERT_TRUE(r) << r.error().toString();
  const std::vector<Session>& s = r->sessions;
  ASSERT_EQ(s.size(), 5u);
  // Values pinned from this implementation and cross-checked with an independent Python
  // SplitMix64 + polar-normal + exponential transcription of docs/traces.md.
  struct Row {
    double arrival_ms;
    std::uint32_t input_length;
    std::uint32_t output_length;
  };
  const Row expected[] = {
      {0.0, 1086, 109},
      {58.74631787168617, 1066, 104},
      {216.7325811677719, 698, 50},
      {273.9965493214997, 793, 120},
      {489.6932464251819, 998, 100},
  };
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(s[i].session_id, "session_" + std::to_string(i));
    EXPECT_NEAR(*s[i].first_arrival_ms, expected[i].arrival_ms, 1e-9) << "row " << i;
    ASSERT_EQ(s[i].turns.size(), 1u);
    EXPECT_EQ(s[i].turns[0].input_length, expected[i].input_length) << "row " << i;
    EXPECT_EQ(s[i].turns[0].output_length, expected[i].output_length) << "row " << i;
  }
  // Fresh ids count from 1 across sessions.
  EXPECT_EQ(s[0].turns[0].hash_ids.front(), 1u);
  EXPECT_EQ(s[1].turns[0].hash_ids.front(), s[0].turns[0].hash_ids.back() + 1);
}

TEST(SyntheticWorkloadTest, SameSeedSameWorkloadDifferentSeedDiffers) {
  auto a = generateSyntheticWorkload(baseSpec());
  auto b = generateSyntheticWorkload(baseSpec());
  SyntheticSpec other = baseSpec();
  other.seed = 2;
  auto c = generateSyntheticWorkload(other);
  ASSERT_TRUE(a && b && c);
  for (std::size_t i = 0; i < a->sessions.size(); ++i) {
    EXPECT_EQ(a->sessions[i].first_arrival_ms, b->sessions[i].first_arrival_ms);
    EXPECT_EQ(a->sessions[i].turns[0].hash_ids, b->sessions[i].turns[0].hash_ids);
  }
  EXPECT_NE(a->sessions[1].first_arrival_ms, c->sessions[1].first_arrival_ms);
}

TEST(SyntheticWorkloadTest, LorasFollowZipfPopularityAndLeaveOtherDrawsAlone) {
  SyntheticSpec spec = baseSpec();
  spec.request_count = 30000;
  spec.turns_per_session = 2;
  auto none = generateSyntheticWorkload(spec);
  spec.loras = 3;
  auto with = generateSyntheticWorkload(spec);
  ASSERT_TRUE(none && with);
  std::map<std::string, double> share;
  for (const Session& s : with->sessions) {
    ASSERT_TRUE(s.turns[0].lora.has_value());
    EXPECT_EQ(s.turns[1].lora, s.turns[0].lora);  // one adapter per session
    share[*s.turns[0].lora] += 1.0 / spec.request_count;
  }
  // P(k) = (1/k) / H_3: 6/11, 3/11, 2/11.
  ASSERT_EQ(share.size(), 3u);
  EXPECT_NEAR(share["lora-1"], 6.0 / 11, 0.01);
  EXPECT_NEAR(share["lora-2"], 3.0 / 11, 0.01);
  EXPECT_NEAR(share["lora-3"], 2.0 / 11, 0.01);
  // No adapter without --loras; the first session's arrival (before the draw) is unchanged.
  EXPECT_FALSE(none->sessions[0].turns[0].lora.has_value());
  EXPECT_EQ(none->sessions[0].first_arrival_ms, with->sessions[0].first_arrival_ms);
  spec.loras = kMaxSyntheticLoras + 1;
  EXPECT_THAT(generateSyntheticWorkload(spec).error().message, HasSubstr("loras must be <="));
}

TEST(SyntheticWorkloadTest, LengthsHaveRequestedMeansAndIdsMatchLengths) {
  SyntheticSpec spec = baseSpec();
  spec.request_count = 20'000;
  auto r = generateSyntheticWorkload(spec);
  ASSERT_TRUE(r);
  double in = 0, out = 0;
  for (const Session& s : r->sessions) {
    const Turn& t = s.turns[0];
    in += t.input_length;
    out += t.output_length;
    ASSERT_EQ(t.hash_ids.size(), (t.input_length + 511) / 512);
    ASSERT_GE(t.input_length, 1u);
  }
  EXPECT_NEAR(in / 20'000, 1000.0, 5.0);
  EXPECT_NEAR(out / 20'000, 100.0, 0.5);
}

TEST(SyntheticWorkloadTest, LengthsAreClampedToAtLeastOne) {
  SyntheticSpec spec = baseSpec();
  spec.input_tokens = {.mean = -50, .stddev = 0};
  spec.output_tokens = {.mean = 0.4, .stddev = 0};
  auto r = generateSyntheticWorkload(spec);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->sessions[0].turns[0].input_length, 1u);
  EXPECT_EQ(r->sessions[0].turns[0].output_length, 1u);
}

double meanGap(const Workload& w) {
  return *w.sessions.back().first_arrival_ms / static_cast<double>(w.sessions.size() - 1);
}

TEST(SyntheticWorkloadTest, ArrivalProcesses) {
  SyntheticSpec spec = baseSpec();
  spec.request_count = 20'001;

  spec.arrival = {.kind = ArrivalKind::Burst};
  auto burst = generateSyntheticWorkload(spec);
  ASSERT_TRUE(burst);
  EXPECT_EQ(*burst->sessions.back().first_arrival_ms, 0.0);

  spec.arrival = {.kind = ArrivalKind::Constant, .rate_per_s = 4};
  auto constant = generateSyntheticWorkload(spec);
  ASSERT_TRUE(constant);
  EXPECT_DOUBLE_EQ(*constant->sessions[3].first_arrival_ms, 750.0);

  spec.arrival = {.kind = ArrivalKind::Interval, .interval_ms = 12.5};
  auto interval = generateSyntheticWorkload(spec);
  ASSERT_TRUE(interval);
  EXPECT_DOUBLE_EQ(*interval->sessions[2].first_arrival_ms, 25.0);

  spec.arrival = {.kind = ArrivalKind::Poisson, .rate_per_s = 20};
  auto poisson = generateSyntheticWorkload(spec);
  ASSERT_TRUE(poisson);
  EXPECT_NEAR(meanGap(*poisson), 50.0, 1.5);

  spec.arrival = {.kind = ArrivalKind::Gamma, .rate_per_s = 20, .smoothness = 0.25};
  auto gamma = generateSyntheticWorkload(spec);
  ASSERT_TRUE(gamma);
  EXPECT_NEAR(meanGap(*gamma), 50.0, 3.0);
  // Gamma with smoothness < 1 is burstier: its gaps have a larger variance than Poisson's.
  const auto gapVariance = [](const Workload& w) {
    const double m = meanGap(w);
    double v = 0;
    for (std::size_t i = 1; i < w.sessions.size(); ++i) {
      const double g = *w.sessions[i].first_arrival_ms - *w.sessions[i - 1].first_arrival_ms;
      v += (g - m) * (g - m);
    }
    return v / static_cast<double>(w.sessions.size() - 1);
  };
  EXPECT_NEAR(gapVariance(*poisson), 2500.0, 250.0);   // mean²
  EXPECT_NEAR(gapVariance(*gamma), 10'000.0, 1500.0);  // mean² / smoothness
}

TEST(SyntheticWorkloadTest, SharedPrefixGroupsUseTheSpecifiedIdScheme) {
  SyntheticSpec spec = baseSpec();
  spec.request_count = 200;
  spec.input_tokens = {.mean = 4096, .stddev = 0};  // n = 8 blocks
  spec.shared_prefix_ratio = 0.5;                   // p = 4 shared blocks
  spec.num_prefix_groups = 3;
  auto r = generateSyntheticWorkload(spec);
  ASSERT_TRUE(r);
  std::set<std::uint64_t> groups_seen;
  std::set<std::uint64_t> fresh;
  for (const Session& s : r->sessions) {
    const auto& ids = s.turns[0].hash_ids;
    ASSERT_EQ(ids.size(), 8u);
    const std::uint64_t group = (ids[0] - kSharedIdBase) / kSharedIdsPerGroup;
    ASSERT_LT(group, 3u);
    groups_seen.insert(group);
    for (std::uint64_t b = 0; b < 4; ++b) {
      EXPECT_EQ(ids[b], kSharedIdBase + group * kSharedIdsPerGroup + b);
    }
    for (std::size_t b = 4; b < 8; ++b) {
      EXPECT_LT(ids[b], kSharedIdBase);
      EXPECT_TRUE(fresh.insert(ids[b]).second) << "fresh id reused: " << ids[b];
    }
  }
  EXPECT_EQ(groups_seen.size(), 3u);
  EXPECT_EQ(*fresh.begin(), 1u);
}

TEST(SyntheticWorkloadTest, RatioWithoutGroupsSharesNothing) {
  SyntheticSpec spec = baseSpec();
  spec.shared_prefix_ratio = 1.0;
  auto r = generateSyntheticWorkload(spec);
  ASSERT_TRUE(r);
  for (const Session& s : r->sessions) {
    for (const std::uint64_t id : s.turns[0].hash_ids) EXPECT_LT(id, kSharedIdBase);
  }
}

TEST(SyntheticWorkloadTest, TurnsAndInterTurnDelays) {
  SyntheticSpec spec = baseSpec();
  spec.request_count = 2'000;
  spec.turns_per_session = 3;
  spec.inter_turn_delay = {.kind = DelayKind::Exponential, .ms = 200};
  auto r = generateSyntheticWorkload(spec);
  ASSERT_TRUE(r);
  double sum = 0;
  for (const Session& s : r->sessions) {
    ASSERT_EQ(s.turns.size(), 3u);
    EXPECT_EQ(s.turns[0].delay_after_previous_ms, 0.0);
    sum += s.turns[1].delay_after_previous_ms + s.turns[2].delay_after_previous_ms;
  }
  EXPECT_NEAR(sum / 4'000, 200.0, 10.0);

  spec.inter_turn_delay = {.kind = DelayKind::Constant, .ms = 30};
  auto c = generateSyntheticWorkload(spec);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->sessions[5].turns[2].delay_after_previous_ms, 30.0);
  EXPECT_EQ(c->sessions[5].turns[0].delay_after_previous_ms, 0.0);
}

TEST(SyntheticWorkloadTest, InvalidSpecsNameTheParameter) {
  const auto err = [](SyntheticSpec s) {
    auto r = generateSyntheticWorkload(s);
    return r ? std::string("ok") : r.error().message;
  };
  SyntheticSpec s = baseSpec();
  s.request_count = 0;
  EXPECT_THAT(err(s), HasSubstr("request_count"));
  s = baseSpec();
  s.turns_per_session = 0;
  EXPECT_THAT(err(s), HasSubstr("turns_per_session"));
  s = baseSpec();
  s.arrival.rate_per_s = 0;
  EXPECT_THAT(err(s), HasSubstr("rate"));
  s = baseSpec();
  s.arrival = {.kind = ArrivalKind::Gamma, .rate_per_s = 1, .smoothness = 0};
  EXPECT_THAT(err(s), HasSubstr("smoothness"));
  s = baseSpec();
  s.shared_prefix_ratio = 1.5;
  EXPECT_THAT(err(s), HasSubstr("shared_prefix_ratio"));
  s = baseSpec();
  s.num_prefix_groups = 2049;
  EXPECT_THAT(err(s), HasSubstr("num_prefix_groups"));
  s = baseSpec();
  s.block_size = 0;
  EXPECT_THAT(err(s), HasSubstr("block_size"));
  s = baseSpec();
  s.input_tokens.stddev = -1;
  EXPECT_THAT(err(s), HasSubstr("input_tokens"));
  s = baseSpec();
  s.inter_turn_delay = {.kind = DelayKind::Constant, .ms = -1};
  EXPECT_THAT(err(s), HasSubstr("inter_turn_delay"));
}

}  // namespace
}  // namespace mocker::replay

namespace mocker::replay {
namespace {

// With session_context each turn's ids start with the whole previous prompt, its length counts
// the previous ids as full blocks, and the sampled lengths (the RNG draws) are unchanged.
TEST(SyntheticSessionContext, EachTurnExtendsThePreviousPrompt) {
  SyntheticSpec spec{.request_count = 5,
                     .turns_per_session = 3,
                     .input_tokens = {100, 30},
                     .output_tokens = {10, 0},
                     .shared_prefix_ratio = 0.5,
                     .num_prefix_groups = 2,
                     .block_size = 16,
                     .seed = 9};
  const auto plain = generateSyntheticWorkload(spec);
  spec.session_context = true;
  const auto ctx = generateSyntheticWorkload(spec);
  ASSERT_TRUE(plain && ctx);
  ASSERT_EQ(ctx->sessions.size(), 5u);
  for (std::size_t s = 0; s < 5; ++s) {
    const auto& turns = ctx->sessions[s].turns;
    const auto& plain_turns = plain->sessions[s].turns;
    // Turn 0 as without the option (its fresh ids are numbered later: earlier sessions' later
    // turns took other ids).
    EXPECT_EQ(turns[0].input_length, plain_turns[0].input_length);
    EXPECT_EQ(turns[0].hash_ids.size(), plain_turns[0].hash_ids.size());
    for (std::size_t t = 1; t < 3; ++t) {
      const auto& prev = turns[t - 1].hash_ids;
      ASSERT_GT(turns[t].hash_ids.size(), prev.size());
      EXPECT_TRUE(std::equal(prev.begin(), prev.end(), turns[t].hash_ids.begin()));
      EXPECT_EQ(turns[t].input_length, prev.size() * 16 + plain_turns[t].input_length);
      EXPECT_EQ(turns[t].hash_ids.size(), prev.size() + (plain_turns[t].input_length + 15) / 16);
      EXPECT_EQ(turns[t].output_length, plain_turns[t].output_length);
    }
  }
}

}  // namespace
}  // namespace mocker::replay
