// Fuzz checks of the protocol decoders (client, forward-pass metrics, KV events, index queries).
#include <span>

#include "protocol/client.h"
#include "protocol/detail/output_fast_path.h"
#include "protocol/fpm.h"
#include "protocol/index_query.h"
#include "protocol/kv_events.h"
#include "tests/fuzz/fuzz_checks.h"
#include "tests/fuzz/fuzz_util.h"

namespace mocker::fuzz {
namespace {

std::span<const std::byte> bytesOf(Input input) { return std::as_bytes(input); }

}  // namespace

void checkClientMessage(Input input) {
  const auto bytes = bytesOf(input);
  const auto decoded = protocol::decodeClientMessage(bytes);
  (void)protocol::peekRequestId(bytes);
  const auto general = protocol::detail::decodeClientMessageGeneral(bytes);
  MOCKER_FUZZ_REQUIRE(decoded.has_value() == general.has_value());
  MOCKER_FUZZ_REQUIRE(decoded ? *decoded == *general
                              : decoded.error().message == general.error().message);
  if (!decoded) {
    MOCKER_FUZZ_REQUIRE(!decoded.error().message.empty());
    return;
  }
  const auto again = protocol::decodeClientMessage(protocol::encodeClientMessage(*decoded));
  MOCKER_FUZZ_REQUIRE(again.has_value());
  MOCKER_FUZZ_REQUIRE(*again == *decoded);
}

void checkFpm(Input input) {
  const auto decoded = protocol::decodeFpm(bytesOf(input));
  if (!decoded) {
    MOCKER_FUZZ_REQUIRE(!decoded.error().message.empty());
    return;
  }
  const auto again = protocol::decodeFpm(protocol::encodeFpm(*decoded));
  MOCKER_FUZZ_REQUIRE(again.has_value());
  MOCKER_FUZZ_REQUIRE(*again == *decoded);
}

void checkKvEvents(Input input) {
  const auto decoded = protocol::decodeKvEventBatch(bytesOf(input));
  if (!decoded) {
    MOCKER_FUZZ_REQUIRE(!decoded.error().message.empty());
    return;
  }
  for (protocol::KvLayout layout : {protocol::KvLayout::P8, protocol::KvLayout::Map}) {
    const auto again =
        protocol::decodeKvEventBatch(protocol::encodeKvEventBatch(*decoded, {.layout = layout}));
    MOCKER_FUZZ_REQUIRE(again.has_value());
    MOCKER_FUZZ_REQUIRE(*again == *decoded);
  }
}

void checkIndexQuery(Input input) {
  const auto bytes = bytesOf(input);
  const auto request = index::decodeQueryRequest(bytes);
  (void)index::peekQueryId(bytes);
  if (request) {
    const auto again = index::decodeQueryRequest(index::encodeQueryRequest(*request));
    MOCKER_FUZZ_REQUIRE(again.has_value());
    MOCKER_FUZZ_REQUIRE(*again == *request);
  } else {
    MOCKER_FUZZ_REQUIRE(!request.error().message.empty());
  }
  const auto reply = index::decodeQueryReply(bytes);
  if (reply) {
    const auto again = index::decodeQueryReply(index::encodeQueryReply(*reply));
    MOCKER_FUZZ_REQUIRE(again.has_value());
    MOCKER_FUZZ_REQUIRE(*again == *reply);
  } else {
    MOCKER_FUZZ_REQUIRE(!reply.error().message.empty());
  }
}

}  // namespace mocker::fuzz
