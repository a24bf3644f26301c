// LoraAdapters (gateway/lora_adapters.h): `--lora-modules` values, and the bodies and answers of
// vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter, hostile input included.
#include "gateway/lora_adapters.h"

#include <gtest/gtest.h>

namespace mocker::gateway {
namespace {

LoraAdapters adapters(std::vector<LoraAdapter> list = {}) {
  auto a = LoraAdapters::create("base", std::move(list));
  EXPECT_TRUE(a.has_value()) << a.error().message;
  return std::move(a).value();
}

ApiError errorOf(const std::variant<std::string, ApiError>& r) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << std::get<std::string>(r);
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(LoraAdaptersTest, LoraModulesNameEqualsPathOrTheNameAlone) {
  EXPECT_EQ(*parseLoraModule("sql=/adapters/sql-lora"),
            (LoraAdapter{.name = "sql", .path = "/adapters/sql-lora"}));
  EXPECT_EQ(*parseLoraModule("sql"), (LoraAdapter{.name = "sql", .path = "sql"}));
  EXPECT_EQ(*parseLoraModule("a=b=c"), (LoraAdapter{.name = "a", .path = "b=c"}));
  const auto error = [](std::string_view spec) {
    auto r = parseLoraModule(spec);
    EXPECT_FALSE(r.has_value()) << spec;
    return r.has_value() ? std::string() : r.error().message;
  };
  EXPECT_EQ(error("=/p"), "--lora-modules: name: an adapter name must not be empty");
  EXPECT_EQ(error("sql="),
            "--lora-modules: 'sql=': the path is empty (give name=path or the name alone)");
  EXPECT_NE(error("a\tb=/p").find("control character 0x09"), std::string::npos);
  EXPECT_NE(error(std::string(257, 'x')).find("at most 256 bytes"), std::string::npos);
  EXPECT_NE(error("ad\xc3=/p").find("not valid UTF-8"), std::string::npos);

  EXPECT_FALSE(LoraAdapters::create("base", {{"a", "a"}, {"a", "b"}}).has_value());
  EXPECT_FALSE(LoraAdapters::create("base", {{"base", "p"}}).has_value());
}

// vLLM's JSON form: name and path required, base_model_name optional (the adapter's `parent`);
// unknown keys, wrong types and malformed JSON are refused with the key named.
TEST(LoraAdaptersTest, LoraModulesJsonFormAsVllm) {
  EXPECT_EQ(
      *parseLoraModule(
          R"({"name": "sql", "path": "/a/sql", "base_model_name": "meta-llama/Llama-3-8B"})"),
      (LoraAdapter{.name = "sql", .path = "/a/sql", .base_model_name = "meta-llama/Llama-3-8B"}));
  EXPECT_EQ(*parseLoraModule(R"({"name": "sql", "path": "/a/sql"})"),
            (LoraAdapter{.name = "sql", .path = "/a/sql"}));
  EXPECT_EQ(*parseLoraModule(R"({"name": "sql", "path": "/a/sql", "base_model_name": null})"),
            (LoraAdapter{.name = "sql", .path = "/a/sql"}));
  const auto error = [](std::string_view spec) {
    auto r = parseLoraModule(spec);
    EXPECT_FALSE(r.has_value()) << spec;
    return r.has_value() ? std::string() : r.error().message;
  };
  EXPECT_NE(error(R"({"name": "sql")").find("invalid JSON"), std::string::npos);
  EXPECT_NE(error(R"({"name": "sql"})").find("needs \"name\" and \"path\""), std::string::npos);
  EXPECT_NE(error(R"({"path": "/p"})").find("needs"), std::string::npos);
  EXPECT_EQ(error(R"({"name": "sql", "path": "/p", "rank": 8})"),
            "--lora-modules: unknown key 'rank' (expected name, path, base_model_name)");
  EXPECT_EQ(error(R"({"name": 7, "path": "/p"})"),
            "--lora-modules: 'name' must be a string, got number");
  EXPECT_EQ(error(R"({"name": "", "path": "/p"})"),
            "--lora-modules: name: an adapter name must not be empty");
  EXPECT_NE(error(R"({"name": "a\u0001b", "path": "/p"})").find("control character"),
            std::string::npos);
  EXPECT_NE(error(R"({"name": "sql", "path": ""})").find("the path is empty"), std::string::npos);
}

TEST(LoraAdaptersTest, LoadAndUnloadAnswerAsVllm) {
  LoraAdapters a = adapters({{"sql", "/p/sql"}});
  EXPECT_EQ(a.find("sql")->path, "/p/sql");
  EXPECT_EQ(a.find("base"), nullptr);
  EXPECT_EQ(std::get<std::string>(a.load(R"({"lora_name": "chat", "lora_path": "/p/chat"})")),
            "Success: LoRA adapter 'chat' added successfully.");
  ASSERT_EQ(a.adapters().size(), 2u);
  EXPECT_EQ(a.adapters()[1], (LoraAdapter{.name = "chat", .path = "/p/chat"}));

  const ApiError again = errorOf(a.load(R"({"lora_name": "sql", "lora_path": "/q"})"));
  EXPECT_EQ(again.status, 400);
  EXPECT_EQ(again.message, "The lora adapter 'sql' has already been loaded.");
  EXPECT_EQ(again.type, std::optional<std::string>("InvalidUserInput"));
  for (const char* body :
       {R"({"lora_name": "x"})", R"({"lora_path": "/x"})",
        R"({"lora_name": "", "lora_path": "/x"})", R"({"lora_name": null, "lora_path": "/x"})"}) {
    const ApiError e = errorOf(a.load(body));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.message, "Both 'lora_name' and 'lora_path' must be provided.") << body;
  }

  EXPECT_EQ(std::get<std::string>(a.unload(R"({"lora_name": "sql"})")),
            "Success: LoRA adapter 'sql' removed successfully.");
  EXPECT_EQ(a.find("sql"), nullptr);
  const ApiError gone = errorOf(a.unload(R"({"lora_name": "sql"})"));
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(gone.message, "The lora adapter 'sql' cannot be found.");
  EXPECT_EQ(errorOf(a.unload(R"({"lora_int_id": 1})")).status, 404);
  const ApiError none = errorOf(a.unload("{}"));
  EXPECT_EQ(none.status, 400);
  EXPECT_EQ(none.message, "either 'lora_name' and 'lora_int_id' needs to be provided.");
  // Unloaded, it may be loaded again (at the end of the load order).
  EXPECT_TRUE(std::holds_alternative<std::string>(
      a.load(R"({"lora_name": "sql", "lora_path": "/p/sql2"})")));
  EXPECT_EQ(a.adapters().back(), (LoraAdapter{.name = "sql", .path = "/p/sql2"}));
}

TEST(LoraAdaptersTest, HostileBodiesAreClearErrorsAndChangeNothing) {
  LoraAdapters a = adapters();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "invalid JSON body"},
      {"[1]", "the body must be a JSON object"},
      {R"({"lora_name": 7, "lora_path": "/x"})", "lora_name: expected a string, got number"},
      {R"({"lora_name": "x", "lora_path": ["/x"]})", "lora_path: expected a string, got array"},
      {R"({"lora_name": "a\u0001b", "lora_path": "/x"})", "control character 0x01"},
      {R"({"lora_name": ")" + std::string(300, 'n') + R"(", "lora_path": "/x"})",
       "at most 256 bytes"},
      {"{\"lora_name\": \"ad\xc3\", \"lora_path\": \"/x\"}", "invalid JSON body"},
      {R"({"lora_name": "base", "lora_path": "/x"})", "is the base model's name"},
  };
  for (const auto& [body, needle] : cases) {
    const ApiError e = errorOf(a.load(body));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_NE(e.message.find(needle), std::string::npos) << body << " → " << e.message;
  }
  EXPECT_EQ(errorOf(a.unload(R"({"lora_name": 1})")).status, 400);
  EXPECT_TRUE(a.adapters().empty());
}

}  // namespace
}  // namespace mocker::gateway
