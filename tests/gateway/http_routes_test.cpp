#include "gateway/http_routes.h"

#include <gtest/gtest.h>

namespace mocker::gateway {
namespace {

TEST(HttpRoutesTest, EachServedPathHasItsMethodAndMetricsLabel) {
  const struct {
    const char* method;
    const char* path;
    const char* endpoint;
  } cases[] = {{"GET", "/v1/models", "models"},
               {"POST", "/v1/completions", "completions"},
               {"POST", "/v1/chat/completions", "chat_completions"},
               {"POST", "/tokenize", "tokenize"},
               {"POST", "/detokenize", "detokenize"},
               {"GET", "/health", "health"},
               {"GET", "/ready", "ready"},
               {"GET", "/metrics", "metrics"}};
  for (const auto& c : cases) {
    const RouteLookup r = lookupRoute(c.method, c.path, false);
    EXPECT_FALSE(r.error.has_value()) << c.path;
    EXPECT_EQ(r.endpoint, c.endpoint) << c.path;
    EXPECT_FALSE(r.lora_update) << c.path;
  }
}

TEST(HttpRoutesTest, AnotherMethodIs405WithAllowAndAnUnknownPath404) {
  const RouteLookup wrong = lookupRoute("GET", "/v1/chat/completions", false);
  ASSERT_TRUE(wrong.error.has_value());
  EXPECT_EQ(wrong.error->status, 405);
  EXPECT_EQ(wrong.error->message, "method GET not allowed on /v1/chat/completions");
  EXPECT_EQ(wrong.allow, "POST");
  EXPECT_EQ(wrong.endpoint, "unknown");
  EXPECT_EQ(lookupRoute("POST", "/health", false).allow, "GET");

  for (const char* path : {"/v1/embeddings", "/", "", "/v1/models/", "/health?x=1", "/V1/models"}) {
    const RouteLookup r = lookupRoute("GET", path, false);
    ASSERT_TRUE(r.error.has_value()) << path;
    EXPECT_EQ(r.error->status, 404) << path;
    EXPECT_EQ(r.error->message, std::string("no route ") + path);
    EXPECT_TRUE(r.allow.empty());
    EXPECT_EQ(r.endpoint, "unknown");
  }
}

TEST(HttpRoutesTest, LoraUpdateRoutesExistOnlyWhenAllowed) {
  for (const char* path : {"/v1/load_lora_adapter", "/v1/unload_lora_adapter"}) {
    const RouteLookup off = lookupRoute("POST", path, false);
    ASSERT_TRUE(off.error.has_value());
    EXPECT_EQ(off.error->status, 404) << "vLLM without --allow-runtime-lora-updating";
    const RouteLookup on = lookupRoute("POST", path, true);
    EXPECT_FALSE(on.error.has_value());
    EXPECT_TRUE(on.lora_update);
    EXPECT_EQ(on.endpoint, std::string(path).substr(4));
    EXPECT_EQ(lookupRoute("GET", path, true).error->status, 405);
  }
}

TEST(HttpRoutesTest, BearerKeyMustMatchExactly) {
  const std::set<std::string> keys = {"k1", "secret"};
  EXPECT_TRUE(bearerAuthorized("Bearer k1", keys));
  EXPECT_TRUE(bearerAuthorized("Bearer secret", keys));
  EXPECT_FALSE(bearerAuthorized("Bearer k2", keys));
  EXPECT_FALSE(bearerAuthorized("Bearer  k1", keys));
  EXPECT_FALSE(bearerAuthorized("bearer k1", keys));
  EXPECT_FALSE(bearerAuthorized("k1", keys));
  EXPECT_FALSE(bearerAuthorized("Bearer ", keys));
  EXPECT_FALSE(bearerAuthorized("", keys));
  EXPECT_FALSE(bearerAuthorized("Bearer k1 ", keys));
}

}  // namespace
}  // namespace mocker::gateway
