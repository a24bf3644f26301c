// sortForHandling (gateway/output_order.h): a worker output message's entries are handled first
// tokens first (oldest request first), then the others newest request first.
#include "gateway/output_order.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mocker::gateway
