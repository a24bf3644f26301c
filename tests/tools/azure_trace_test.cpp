#include "tools/replay/azure_trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/tools/replay_test_util.h"

namespace mocker::replay {
namespace {

using ::testing::HasSubstr;

constexpr const char* kHeader = "TIMESTAMP,ContextTokens,GeneratedTokens\n";

TEST(AzureTimestampTest, DaysFromCivilKnownDates) {
  EXPECT_EQ(daysFromCivil(1970, 1, 1), 0);
  EXPECT_EQ(daysFromCivil(1969, 12, 31), -1);
  EXPECT_EQ(daysFromCivil(2000, 3, 1), 11'017);
  EXPECT_EQ(daysFromCivil(2023, 11, 16), 19'677);
  EXPECT_EQ(daysFromCivil(2024, 2, 29) + 1, daysFromCivil(2024, 3, 1));
}

TEST(AzureTimestampTest, ParsesToHundredNanosecondTicks) {
  auto t = parseAzureTimestamp("2023-11-16 18:15:46.6805900");
  ASSERT_TRUE(t) << t.error().toString();
  // 2023-11-16 = day 19677; 18:15:46 = 65746 s.
  EXPECT_EQ(*t, (19'677LL * 86'400 + 65'746) * 10'000'000 + 6'805'900);
  auto no_fraction = parseAzureTimestamp("1970-01-01 00:00:01");
  ASSERT_TRUE(no_fraction);
  EXPECT_EQ(*no_fraction, 10'000'000);
  auto short_fraction = parseAzureTimestamp("1970-01-01T00:00:00.5");
  ASSERT_TRUE(short_fraction);
  EXPECT_EQ(*short_fraction, 5'000'000);
}

TEST(AzureTimestampTest, RejectsMalformedTimestamps) {
  for (const char* bad :
       {"", "2023-11-16", "2023-11-16 18:15", "2023/11/16 18:15:46", "2023-13-01 00:00:00",
        "2023-02-29 00:00:00", "2023-04-31 00:00:00", "2023-11-16 24:00:00", "2023-11-16 18:60:00",
        "2023-11-16 18:15:60", "2023-11-16 18:15:46.", "2023-11-16 18:15:46.12345678",
        "2023-11-16 18:15:46.12a", "2023-11-16 18:15:46Z", "2023-11-16 18:15:46.1 +01:00"}) {
    EXPECT_FALSE(parseAzureTimestamp(bad)) << bad;
  }
  EXPECT_TRUE(parseAzureTimestamp("2024-02-29 00:00:00"));
}

TEST(AzureTraceTest, SpecExampleArrivalsAndFreshHashIds) {
  const std::string text = std::string(kHeader) +
                           "2023-11-16 18:15:46.6805900,1000,10\n"
                           "2023-11-16 18:15:47.0,513,0\n";
  auto r = parseAzureTrace(text, {});
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_EQ(r->sessions.size(), 2u);
  EXPECT_DOUBLE_EQ(*r->sessions[0].first_arrival_ms, 0.0);
  EXPECT_DOUBLE_EQ(*r->sessions[1].first_arrival_ms, 319.41);
  const Turn& a = r->sessions[0].turns[0];
  const Turn& b = r->sessions[1].turns[0];
  EXPECT_EQ(a.input_length, 1000u);
  EXPECT_EQ(a.output_length, 10u);
  EXPECT_EQ(a.hash_ids, (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(b.hash_ids, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(b.output_length, 0u);
  EXPECT_EQ(r->sessions[0].session_id, "request_2");
  EXPECT_EQ(r->sessions[1].session_id, "request_3");
}

TEST(AzureTraceTest, SortsStablyAndAppliesSpeedup) {
  const std::string text = std::string(kHeader) +
                           "2023-11-16 18:00:01,10,1\n"
                           "2023-11-16 18:00:00,20,2\n"
                           "2023-11-16 18:00:01,30,3\n";
  auto r = parseAzureTrace(text, {.trace_block_size = 16, .arrival_speedup_ratio = 4.0});
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_EQ(r->sessions.size(), 3u);
  EXPECT_EQ(r->sessions[0].turns[0].input_length, 20u);
  EXPECT_EQ(r->sessions[1].turns[0].input_length, 10u);
  EXPECT_EQ(r->sessions[2].turns[0].input_length, 30u);
  EXPECT_DOUBLE_EQ(*r->sessions[2].first_arrival_ms, 250.0);
  // Ids are handed out in arrival order: 20 tokens = 2 blocks, 10 = 1, 30 = 2.
  EXPECT_EQ(r->sessions[1].turns[0].hash_ids, (std::vector<std::uint64_t>{2}));
  EXPECT_EQ(r->trace_block_size, 16u);
}

TEST(AzureTraceTest, MalformedRowCatalogueNamesLineNumbers) {
  struct Case {
    const char* row;
    const char* message;
  };
  const Case cases[] = {
      {"2023-11-16 18:00:00,10", "3 comma-separated fields"},
      {"2023-11-16 18:00:00,10,1,4", "3 comma-separated fields"},
      {"2023-11-16 18:00,10,1", "bad TIMESTAMP"},
      {"2023-11-16 18:00:00,0,1", "ContextTokens must be >= 1"},
      {"2023-11-16 18:00:00,-5,1", "ContextTokens must be a non-negative integer"},
      {"2023-11-16 18:00:00,10,x", "GeneratedTokens must be a non-negative integer"},
      {"2023-11-16 18:00:00,10,", "GeneratedTokens"},
      {"2023-11-16 18:00:00,99999999999,1", "ContextTokens"},
  };
  for (const Case& c : cases) {
    const std::string text = std::string(kHeader) + "2023-11-16 18:00:00,10,1\n" + c.row + "\n";
    auto r = parseAzureTrace(text, {});
    ASSERT_FALSE(r) << c.row;
    EXPECT_THAT(r.error().message, HasSubstr("line 3: ")) << c.row;
    EXPECT_THAT(r.error().message, HasSubstr(c.message)) << c.row;
  }
}

TEST(AzureTraceTest, HeaderIsChecked) {
  auto r = parseAzureTrace("time,in,out\n2023-11-16 18:00:00,10,1\n", {});
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("line 1: expected header"));
  EXPECT_FALSE(parseAzureTrace("", {}));
  EXPECT_THAT(parseAzureTrace(kHeader, {}).error().message, HasSubstr("no requests"));
  EXPECT_TRUE(
      parseAzureTrace("\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                      "2023-11-16 18:00:00,10,1\r\n",
                      {}));
}

TEST(AzureTraceTest, SkipInvalidContinues) {
  const std::string text = std::string(kHeader) +
                           "2023-11-16 18:00:00,10,1\n"
                           "junk\n"
                           "2023-11-16 18:00:02,10,1\n";
  auto r = parseAzureTrace(text, {.skip_invalid = true});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->sessions.size(), 2u);
  ASSERT_EQ(r->skipped_lines.size(), 1u);
  EXPECT_EQ(r->skipped_lines[0].line, 3u);
}

TEST(AzureTraceTest, CodeTraceFile) {
  const std::string path = testing::sampleTrace("azure_llm_inference_2023_code.csv");
  MOCKER_SKIP_UNLESS_SAMPLE_TRACE(path);
  auto r = loadAzureTrace(path, {});
  ASSERT_TRUE(r) << r.error().toString();
  // 8,820 lines: the header plus 8,819 rows (Vidur's splitwise_code.csv count); no trailing \n.
  EXPECT_EQ(r->sessions.size(), 8'819u);
  std::uint64_t input = 0, output = 0, blocks = 0;
  std::set<std::uint64_t> ids;
  for (const Session& s : r->sessions) {
    input += s.turns[0].input_length;
    output += s.turns[0].output_length;
    blocks += s.turns[0].hash_ids.size();
    ids.insert(s.turns[0].hash_ids.begin(), s.turns[0].hash_ids.end());
  }
  EXPECT_EQ(input, 18'059'974u);
  EXPECT_EQ(output, 245'896u);
  EXPECT_EQ(blocks, 40'014u);
  EXPECT_EQ(ids.size(), blocks);  // no two requests share a hash id
  EXPECT_DOUBLE_EQ(*r->sessions.front().first_arrival_ms, 0.0);
  // 2023-11-16 18:17:03.9799600 → 19:14:19.9280160.
  EXPECT_DOUBLE_EQ(*r->sessions.back().first_arrival_ms, 3'435'948.056);
  EXPECT_EQ(r->sessions.front().turns[0].input_length, 4808u);
}

}  // namespace
}  // namespace mocker::replay
