// `mocker compare`: report parsing and its errors, the side-by-side table (values, deltas,
// ratios, column spacing), the JSON and HTML outputs, and the command's exit codes.
#include "tools/replay/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/cli_run.h"
#include "tools/cli.h"
#include "tools/replay/collector.h"
#include "tools/replay/report_output.h"

namespace mocker::replay {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

/// A report of `n` completed requests with TTFT = scale · (i + 1) ms and one token each.
std::string reportText(int n, double scale, std::optional<RunIdentity> identity = std::nullopt) {
  ReplayCollector c;
  for (int i = 0; i < n; ++i) {
    const RequestHandle h = c.onArrival(
        {.session_id = std::to_string(i), .input_length = 100, .requested_output_length = 2}, 0);
    c.onAdmission(h, 0, 50, false);
    c.onToken(h, scale * (i + 1));
    c.onToken(h, scale * (i + 1) + 5);
    c.onTerminal(h, scale * (i + 1) + 5, TerminalStatus::Completed);
  }
  Report r = c.buildReport({});
  r.identity = std::move(identity);
  return formatReportJson(r);
}

RunIdentity identity(std::uint32_t workers, const std::string& router) {
  return {.mocker_version = "0.1.0",
          .git_revision = "abc",
          .mode = "offline",
          .format = "mooncake",
          .trace_path = "t.jsonl",
          .num_workers = workers,
          .router = router,
          .date_utc = "2026-11-30T18:21:20Z",
          .command_line = "mocker replay t.jsonl"};
}

ComparedRun ok(const Result<ComparedRun>& r) {
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return r ? *r : ComparedRun{};
}

std::size_t metricIndex(const std::string& key) {
  const auto& m = compareMetrics();
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (key == m[i].key) return i;
  }
  ADD_FAILURE() << "no metric " << key;
  return 0;
}

TEST(CompareParseTest, ReadsMetricsIdentityAndQuantiles) {
  const Result<ComparedRun> r =
      parseComparedRun("dir/a.json", reportText(4, 10, identity(8, "kv")));
  const ComparedRun run = ok(r);
  EXPECT_EQ(run.name, "a.json");
  EXPECT_EQ(run.label, "offline, 8 workers, kv");
  EXPECT_EQ(run.report_version, kReportVersion);
  EXPECT_EQ(run.values[metricIndex("completed_requests")], 4.0);
  EXPECT_EQ(run.values[metricIndex("mean_ttft_ms")], 25.0);
  EXPECT_FALSE(run.values[metricIndex("goodput_completed_requests")].has_value());
  ASSERT_EQ(run.quantiles.size(), 4u);
  EXPECT_EQ(run.quantiles[0].first, "ttft_ms");
  ASSERT_EQ(run.quantiles[0].second.size(), kQuantilePoints);
  EXPECT_EQ(run.quantiles[0].second.front(), 10.0);
  EXPECT_EQ(run.quantiles[0].second.back(), 40.0);
  EXPECT_EQ(ok(parseComparedRun("b.json", reportText(1, 1))).label, "no identity");
}

TEST(CompareParseTest, ErrorsNameTheFileAndWhatIsWrong) {
  const auto error = [](const std::string& text) {
    const Result<ComparedRun> r = parseComparedRun("x/r.json", text);
    EXPECT_FALSE(r.has_value()) << text;
    return r ? std::string() : r.error().message;
  };
  EXPECT_THAT(error("{\"num_requests\": 1,"), HasSubstr("x/r.json: not valid JSON"));
  EXPECT_THAT(error(""), HasSubstr("x/r.json: not valid JSON"));
  EXPECT_THAT(error("[1, 2]"), HasSubstr("x/r.json: not a mocker report (not a JSON object)"));
  EXPECT_THAT(error("{\"completed\": 3}"),
              HasSubstr("x/r.json: not a mocker report (no \"num_requests\""));

  nlohmann::ordered_json j = nlohmann::ordered_json::parse(reportText(3, 1));
  j["report_version"] = 3;
  EXPECT_THAT(error(j.dump()), HasSubstr("x/r.json: report_version 3 is not supported (this "
                                         "mocker reads 1 to 2)"));
  j["report_version"] = "2";
  EXPECT_THAT(error(j.dump()), HasSubstr("\"report_version\" is \"2\", not an integer"));
  j["report_version"] = 2;
  j["mean_ttft_ms"] = "fast";
  EXPECT_THAT(error(j.dump()), HasSubstr("\"mean_ttft_ms\" is \"fast\", not a number or null"));
  j["mean_ttft_ms"] = 1.0;
  j["quantiles"]["ttft_ms"] = {1, 2, 3};
  EXPECT_THAT(error(j.dump()), HasSubstr("\"quantiles\".\"ttft_ms\" is not an array of 101"));
  nlohmann::ordered_json descending = nlohmann::ordered_json::array();
  for (int i = 0; i < 101; ++i) descending.push_back(100 - i);
  j["quantiles"]["ttft_ms"] = descending;
  EXPECT_THAT(error(j.dump()), HasSubstr("not a number in ascending order"));
  j.erase("quantiles");
  EXPECT_THAT(error(j.dump()), HasSubstr("report_version 2 without a \"quantiles\" object"));

  const Result<ComparedRun> missing = loadComparedRun("/nonexistent/dir/r.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error().message, HasSubstr("cannot open '/nonexistent/dir/r.json'"));
}

TEST(CompareParseTest, VersionOneReportsAreComparedWithoutQuantiles) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(reportText(3, 1));
  j.erase("report_version");
  j.erase("quantiles");
  const ComparedRun run = ok(parseComparedRun("old.json", j.dump()));
  EXPECT_EQ(run.report_version, 1);
  EXPECT_TRUE(run.quantiles.empty());
  const ComparedRun now = ok(parseComparedRun("new.json", reportText(3, 1)));
  const std::string html = renderCompareHtml({run, now});
  EXPECT_THAT(html, HasSubstr("Not plotted (report_version 1, no quantiles): [1] old.json"));
}

TEST(CompareTableTest, ValuesDeltasAndRatiosAgainstTheFirstRun) {
  const std::vector<ComparedRun> runs = {
      ok(parseComparedRun("base.json", reportText(4, 10, identity(1, "round_robin")))),
      ok(parseComparedRun("fast.json", reportText(4, 5, identity(8, "kv")))),
      ok(parseComparedRun("slow.json", reportText(2, 20)))};
  const std::string t = formatCompareTable(runs);
  EXPECT_THAT(t, HasSubstr("[1] base.json  offline, 1 worker, round_robin"));
  EXPECT_THAT(t, HasSubstr("[2] fast.json  offline, 8 workers, kv"));
  EXPECT_THAT(t, HasSubstr("[3] slow.json  no identity"));
  std::istringstream lines(t);
  std::string line, header, ttft, completed, reuse;
  while (std::getline(lines, line)) {
    if (line.starts_with("Metric")) header = line;
    if (line.starts_with("TTFT mean (ms)")) ttft = line;
    if (line.starts_with("Completed")) completed = line;
    if (line.starts_with("Prefix cache reuse (%)")) reuse = line;
  }
  EXPECT_THAT(header, HasSubstr("[1]"));
  EXPECT_THAT(header, HasSubstr("[2]-[1]"));
  EXPECT_THAT(header, HasSubstr("[3]/[1]"));
  // TTFT means: 25, 12.5, 30 → deltas −12.5, +5; ratios 0.5, 1.2.
  const auto words = [](const std::string& s) {
    std::vector<std::string> w;
    std::istringstream in(s);
    for (std::string x; in >> x;) w.push_back(x);
    return w;
  };
  EXPECT_EQ(words(ttft),
            (std::vector<std::string>{"TTFT", "mean", "(ms)", "25.00", "12.50", "30.00", "-12.50",
                                      "0.500x", "+5.00", "1.200x"}));
  EXPECT_EQ(words(completed),
            (std::vector<std::string>{"Completed", "4", "4", "2", "0", "1.000x", "-2", "0.500x"}));
  EXPECT_EQ(words(reuse),
            (std::vector<std::string>{"Prefix", "cache", "reuse", "(%)", "50.00", "50.00", "50.00",
                                      "0.00", "1.000x", "0.00", "1.000x"}));
  // No goodput rows when no run had SLOs; a ratio against 0 is "–".
  EXPECT_THAT(t, Not(HasSubstr("Goodput")));
  std::string preempt;
  std::istringstream p(t);
  while (std::getline(p, line)) {
    if (line.starts_with("Preemptions")) preempt = line;
  }
  EXPECT_EQ(words(preempt),
            (std::vector<std::string>{"Preemptions", "0", "0", "0", "0", "–", "0", "–"}));
}

TEST(CompareTableTest, WideValuesNeverRunTogether) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(reportText(3, 1));
  j["total_throughput_tok_s"] = 123456789012.25;
  j["mean_ttft_ms"] = -98765432.5;
  const std::vector<ComparedRun> runs = {ok(parseComparedRun("a.json", j.dump())),
                                         ok(parseComparedRun("b.json", reportText(3, 1)))};
  const std::string t = formatCompareTable(runs);
  EXPECT_THAT(t, HasSubstr("  123456789012.25  "));
  EXPECT_THAT(t, HasSubstr("  -98765432.50  "));
  // Every table line has the same display width (the columns line up).
  std::istringstream lines(t);
  std::string line;
  std::size_t width = 0;
  bool in_table = false;
  while (std::getline(lines, line)) {
    if (line.starts_with("Metric")) in_table = true;
    if (!in_table) continue;
    std::size_t w = 0;
    for (const char c : line) w += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
    if (width == 0) width = w;
    EXPECT_EQ(w, width) << line;
  }
}

// A live report's latencies are wall-clock against sped-up servers; an offline one's are model
// time. compare says so instead of putting 8.55 next to 178 ms without a word.
TEST(CompareWarningsTest, RunsOnDifferentClocksAreNamed) {
  RunIdentity live = identity(2, "kv");
  live.mode = "live";
  live.servers = {"tcp://127.0.0.1:6000", "tcp://127.0.0.1:6010"};
  live.server_speedup_ratios = {20.0, 20.0};
  const ComparedRun offline_run =
      ok(parseComparedRun("off.json", reportText(4, 10, identity(2, "kv"))));
  const ComparedRun live_run = ok(parseComparedRun("live.json", reportText(4, 0.5, live)));
  EXPECT_EQ(offline_run.time_scale, 1.0);
  EXPECT_EQ(live_run.mode, "live");
  EXPECT_EQ(live_run.time_scale, 20.0);
  // Same clock: no warning.
  EXPECT_TRUE(compareWarnings({offline_run, offline_run}).empty());
  EXPECT_TRUE(compareWarnings({live_run, live_run}).empty());
  const std::vector<std::string> w = compareWarnings({offline_run, live_run});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], HasSubstr("run 2 (live.json: live, wall clock against servers at speedup 20: "
                              "x 20 = model time) and run 1 (off.json: offline, model time)"));
  // Servers at different speedups, or a report without them: the scale is unknown.
  live.server_speedup_ratios = {20.0, 10.0};
  const ComparedRun mixed = ok(parseComparedRun("mixed.json", reportText(4, 0.5, live)));
  EXPECT_FALSE(mixed.time_scale.has_value());
  EXPECT_TRUE(compareWarnings({mixed, mixed}).empty());
  EXPECT_THAT(compareWarnings({live_run, mixed}), ::testing::SizeIs(1));
  EXPECT_THAT(compareWarnings({live_run, mixed})[0], HasSubstr("live, unknown time scale"));
  // The JSON and HTML outputs carry them; the command prints them on stderr.
  EXPECT_EQ(nlohmann::json::parse(formatCompareJson({offline_run, live_run}))["warnings"].size(),
            1u);
  EXPECT_THAT(renderCompareHtml({offline_run, live_run}),
              HasSubstr("differ in mode or time scale"));
}

// The ITL CDF is a CDF of gaps, not of requests, and not labelled as TPOT.
TEST(CompareHtmlTest, ItlPlotIsLabelledAsGaps) {
  const std::vector<ComparedRun> runs = {ok(parseComparedRun("a.json", reportText(4, 10))),
                                         ok(parseComparedRun("b.json", reportText(4, 5)))};
  const std::string html = renderCompareHtml(runs);
  const std::size_t itl = html.find("data-chart=\"cmp_itl_ms\"");
  ASSERT_NE(itl, std::string::npos);
  const std::string chart = html.substr(itl, html.find("</svg>", itl) - itl);
  EXPECT_THAT(chart, HasSubstr("gap between two tokens"));
  EXPECT_THAT(chart, HasSubstr("fraction of gaps"));
  EXPECT_THAT(chart, Not(HasSubstr("time per output token")));
}

TEST(CompareJsonTest, MachineReadableAndDeterministic) {
  const std::vector<ComparedRun> runs = {ok(parseComparedRun("a.json", reportText(4, 10))),
                                         ok(parseComparedRun("b.json", reportText(4, 5)))};
  const std::string text = formatCompareJson(runs);
  EXPECT_EQ(text, formatCompareJson(runs));
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["compare_version"], 1);
  EXPECT_EQ(j["runs"][1]["name"], "b.json");
  bool found = false;
  for (const auto& m : j["metrics"]) {
    if (m["key"] != "mean_ttft_ms") continue;
    found = true;
    EXPECT_EQ(m["values"], (nlohmann::json{25.0, 12.5}));
    EXPECT_EQ(m["delta_vs_first"], (nlohmann::json{0.0, -12.5}));
    EXPECT_EQ(m["ratio_vs_first"], (nlohmann::json{1.0, 0.5}));
  }
  EXPECT_TRUE(found);
}

TEST(CompareHtmlTest, OverlaidCdfsOneSeriesPerRun) {
  const std::vector<ComparedRun> runs = {
      ok(parseComparedRun("a.json", reportText(4, 10, identity(1, "round_robin")))),
      ok(parseComparedRun("b.json", reportText(4, 5))),
      ok(parseComparedRun("c.json", reportText(4, 7)))};
  const std::string html = renderCompareHtml(runs);
  for (const char* id : {"cmp_ttft_ms", "cmp_tpot_ms", "cmp_itl_ms", "cmp_e2e_latency_ms"}) {
    EXPECT_THAT(html, HasSubstr("data-chart=\"" + std::string(id) + "\"")) << id;
  }
  std::size_t series = 0;
  for (auto p = html.find("class=\"series\""); p != std::string::npos;
       p = html.find("class=\"series\"", p + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 12u);  // 4 plots × 3 runs
  EXPECT_THAT(html, HasSubstr("[1] a.json (offline, 1 worker, round_robin)"));
  EXPECT_THAT(html, HasSubstr("<b>command_line</b> mocker replay t.jsonl"));
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_EQ(html, renderCompareHtml(runs));
}

std::string tempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "mocker-compare-XXXXXX").string();
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

using tools::cli_test::CliRun;
using tools::cli_test::runMocker;

TEST(CompareCommandTest, WritesTheTableAndTheOutputsAndExitCodesFollowTheConventions) {
  const std::string dir = tempDir();
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string a = write("a.json", reportText(4, 10));
  const std::string b = write("b.json", reportText(4, 5));
  const std::string bad = write("bad.json", "{\"num_requests\": ");
  const std::string other = write("other.json", "{\"hello\": 1}");

  const CliRun run =
      runMocker({"compare", a, b, "--html", dir + "/c.html", "--json", dir + "/c.json"});
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("[2] b.json"));
  EXPECT_THAT(run.out, HasSubstr("TTFT p99 (ms)"));
  EXPECT_TRUE(std::filesystem::file_size(dir + "/c.html") > 0);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir + "/c.json"))["runs"].size(), 2u);

  EXPECT_EQ(runMocker({"compare", a}).code, 2);  // one report: usage error
  EXPECT_THAT(runMocker({"compare", a}).err, HasSubstr("give at least two reports"));
  EXPECT_EQ(runMocker({"compare"}).code, 2);
  EXPECT_EQ(runMocker({"compare", a, b, "--bogus"}).code, 2);
  const CliRun broken = runMocker({"compare", a, bad});
  EXPECT_EQ(broken.code, 1);
  EXPECT_THAT(broken.err, HasSubstr("mocker compare: " + bad + ": not valid JSON"));
  const CliRun foreign = runMocker({"compare", other, a});
  EXPECT_EQ(foreign.code, 1);
  EXPECT_THAT(foreign.err, HasSubstr(other + ": not a mocker report"));
  const CliRun missing = runMocker({"compare", a, dir + "/nope.json"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("cannot open '" + dir + "/nope.json'"));
  const CliRun unwritable = runMocker({"compare", a, b, "--html", dir + "/no/such/dir/c.html"});
  EXPECT_EQ(unwritable.code, 1);
  EXPECT_THAT(unwritable.err, HasSubstr("cannot write '" + dir + "/no/such/dir/c.html'"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mocker::replay
