#include "protocol/framing.h"

#include <gtest/gtest.h>

#include <vector>

namespace mocker::protocol {
namespace {

TEST(FramingTest, SeqNoIsEightBytesBigEndian) {
  const auto frame = encodeSeqNo(0x0102030405060708ull);
  const std::array<std::byte, 8> want{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4},
                                      std::byte{5}, std::byte{6}, std::byte{7}, std::byte{8}};
  EXPECT_EQ(frame, want);
  EXPECT_EQ(*decodeSeqNo(frame), 0x0102030405060708ull);
}

TEST(FramingTest, EndMarkerIsAllOnes) {
  const auto frame = encodeSeqNo(kReplayEndMarker);
  for (std::byte b : frame) EXPECT_EQ(b, std::byte{0xff});
}

TEST(FramingTest, WrongLengthIsCorruption) {
  const std::vector<std::byte> seven(7);
  const auto r = decodeSeqNo(seven);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::Corruption);
  EXPECT_NE(r.error().message.find("got 7"), std::string::npos);
  EXPECT_FALSE(decodeSeqNo({}).has_value());
}

}  // namespace
}  // namespace mocker::protocol
