// sortForHandling (gateway/output_order.h): a worker output message's entries are handled first
// tokens first (oldest request first), then the others newest request first; burstKeys: the
// messages of one drain ordered together.
#include "gateway/output_order.h"

#include <gtest/gtest.h>

#include <unordered_set>
#include <vector>

namespace mocker::gateway {
namespace {

std::vector<std::uint32_t> indices(const std::vector<OutputKey>& keys) {
  std::vector<std::uint32_t> out;
  for (const OutputKey& k : keys) out.push_back(k.index);
  return out;
}

TEST(OutputOrderTest, FirstTokensGoFirstOldestFirstThenTheRestNewestFirst) {
  // As the engine lists a pass: running requests by admission (dispatch 10, 11, 12), then the
  // newly admitted ones (14, 13) with their first tokens.
  std::vector<OutputKey> keys = {{.index = 0, .first_tokens = false, .dispatch = 10},
                                 {.index = 1, .first_tokens = false, .dispatch = 11},
                                 {.index = 2, .first_tokens = false, .dispatch = 12},
                                 {.index = 3, .first_tokens = true, .dispatch = 14},
                                 {.index = 4, .first_tokens = true, .dispatch = 13}};
  sortForHandling(keys);
  EXPECT_EQ(indices(keys), (std::vector<std::uint32_t>{4, 3, 2, 1, 0}));
}

TEST(OutputOrderTest, AStreamKeepsItsPlaceNearTheFrontAfterItsFirstToken) {
  // Pass 1: request 13 gets its first token ahead of the running 10..12; pass 2: it is the
  // newest running request, so it comes right after this pass's new first token (15).
  std::vector<OutputKey> pass1 = {{.index = 0, .dispatch = 10},
                                  {.index = 1, .dispatch = 11},
                                  {.index = 2, .dispatch = 12},
                                  {.index = 3, .first_tokens = true, .dispatch = 13}};
  sortForHandling(pass1);
  EXPECT_EQ(pass1.front().dispatch, 13u);
  std::vector<OutputKey> pass2 = {{.index = 0, .dispatch = 10},
                                  {.index = 1, .dispatch = 11},
                                  {.index = 2, .dispatch = 12},
                                  {.index = 3, .dispatch = 13},
                                  {.index = 4, .first_tokens = true, .dispatch = 15}};
  sortForHandling(pass2);
  EXPECT_EQ(indices(pass2), (std::vector<std::uint32_t>{4, 3, 2, 1, 0}));
}

TEST(OutputOrderTest, EqualKeysKeepMessageOrder) {
  std::vector<OutputKey> keys = {{.index = 0, .first_tokens = false, .dispatch = 7},
                                 {.index = 1, .first_tokens = false, .dispatch = 7},
                                 {.index = 2, .first_tokens = true, .dispatch = 7},
                                 {.index = 3, .first_tokens = true, .dispatch = 7}};
  sortForHandling(keys);
  EXPECT_EQ(indices(keys), (std::vector<std::uint32_t>{2, 3, 0, 1}));
}

TEST(OutputOrderTest, EmptyAndSingleAreUnchanged) {
  std::vector<OutputKey> none;
  sortForHandling(none);
  EXPECT_TRUE(none.empty());
  std::vector<OutputKey> one = {{.index = 5, .dispatch = 1}};
  sortForHandling(one);
  EXPECT_EQ(indices(one), (std::vector<std::uint32_t>{5}));
}

std::vector<OutputKey> burstOrder(const std::vector<BurstEntry>& entries, std::size_t messages) {
  std::vector<OutputKey> keys;
  std::unordered_set<std::uint64_t> seen;
  burstKeys(entries, messages, keys, seen);
  sortForHandling(keys);
  return keys;
}

TEST(OutputOrderTest, ABurstOfTwoMessagesHandlesEveryFirstTokenBeforeTheRest) {
  // Worker 0's message (running 10, 11; new 14) then worker 1's (running 12; new 13), drained
  // together: 13's first token must not wait behind worker 0's running streams.
  const std::vector<BurstEntry> burst = {{.dispatch = 10, .has_tokens = true, .had_tokens = true},
                                         {.dispatch = 11, .has_tokens = true, .had_tokens = true},
                                         {.dispatch = 14, .has_tokens = true},
                                         {.dispatch = 12, .has_tokens = true, .had_tokens = true},
                                         {.dispatch = 13, .has_tokens = true}};
  EXPECT_EQ(indices(burstOrder(burst, 2)), (std::vector<std::uint32_t>{4, 2, 3, 1, 0}));
}

TEST(OutputOrderTest, ARequestWithAnEntryInTwoMessagesKeepsItsOrder) {
  // Two passes of one worker drained together: request 20 gets its first tokens in the first
  // and more in the second; 21 had none before and gets an empty entry, then its first tokens.
  const std::vector<BurstEntry> burst = {{.dispatch = 20, .has_tokens = true},
                                         {.dispatch = 21, .has_tokens = false},
                                         {.dispatch = 20, .has_tokens = true},
                                         {.dispatch = 21, .has_tokens = true}};
  const auto keys = burstOrder(burst, 2);
  EXPECT_EQ(indices(keys), (std::vector<std::uint32_t>{0, 1, 3, 2}));
  // Only request 20's first entry brings first tokens; 21's tokens follow its empty entry.
  std::size_t first = 0;
  for (const OutputKey& k : keys) first += k.first_tokens ? 1 : 0;
  EXPECT_EQ(first, 1u);
  // One message: every entry is its request's only one.
  const std::vector<BurstEntry> one = {{.dispatch = 30, .has_tokens = true},
                                       {.dispatch = 31, .has_tokens = true, .had_tokens = true}};
  EXPECT_EQ(indices(burstOrder(one, 1)), (std::vector<std::uint32_t>{0, 1}));
}

}  // namespace
}  // namespace mocker::gateway

namespace mocker::gateway {
namespace {

TEST(OutputOrderTest, FirstTokensEndIsWhereTheFirstTokensStopLeading) {
  std::vector<OutputKey> keys;
  EXPECT_EQ(firstTokensEnd(keys), 0u);
  keys = {{.index = 0, .first_tokens = false, .dispatch = 5}};
  EXPECT_EQ(firstTokensEnd(keys), 0u);
  keys = {{.index = 0, .first_tokens = false, .dispatch = 9},
          {.index = 1, .first_tokens = true, .dispatch = 3},
          {.index = 2, .first_tokens = true, .dispatch = 1},
          {.index = 3, .first_tokens = false, .dispatch = 2}};
  sortForHandling(keys);
  EXPECT_EQ(firstTokensEnd(keys), 2u);
  for (OutputKey& k : keys) k.first_tokens = true;
  EXPECT_EQ(firstTokensEnd(keys), 4u) << "all first tokens: nothing after them";
}

}  // namespace
}  // namespace mocker::gateway
