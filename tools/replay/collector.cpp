#include "tools/replay/collector.h"

#include <algorithm>
#include <map>
#include <utility>

#include "base/check.h"
#include "base/enum_names.h"

namespace mocker::replay {

namespace {

constexpr EnumNames<StopReason, 4> kStopReasonNames{
    {{"", StopReason::None},
     {"max_model_len", StopReason::MaxModelLen},
     {"kv_capacity", StopReason::KvCapacity},
     {"max_num_batched_tokens", StopReason::MaxNumBatchedTokens}}};

constexpr EnumNames<TerminalStatus, 5> kTerminalStatusNames{
    {{"incomplete", TerminalStatus::Incomplete},
     {"completed", TerminalStatus::Completed},
     {"rejected", TerminalStatus::Rejected},
     {"cancelled", TerminalStatus::Cancelled},
     {"failed", TerminalStatus::Failed}}};

}  // namespace

// The tables hold string literals: .data() is NUL-terminated.
const char* stopReasonName(StopReason reason) { return enumName(kStopReasonNames, reason).data(); }

StopReason parseWireStopReason(std::string_view reason) {
  for (const auto& [prefix, value] :
       {std::pair{std::string_view("max_model_len: "), StopReason::MaxModelLen},
        std::pair{std::string_view("kv capacity: "), StopReason::KvCapacity},
        std::pair{std::string_view("max_num_batched_tokens: "), StopReason::MaxNumBatchedTokens}}) {
    if (reason.substr(0, prefix.size()) == prefix) return value;
  }
  return StopReason::None;
}

void StopReasonCounts::add(StopReason reason) {
  switch (reason) {
    case StopReason::None:
      return;
    case StopReason::MaxModelLen:
      ++max_model_len;
      return;
    case StopReason::KvCapacity:
      ++kv_capacity;
      return;
    case StopReason::MaxNumBatchedTokens:
      ++max_num_batched_tokens;
      return;
  }
}

const char* terminalStatusName(TerminalStatus status) {
  return enumName(kTerminalStatusNames, status).data();
}

RequestLatencies latenciesOf(const RequestRecord& record) {
  RequestLatencies l;
  const std::vector<double>& tau = record.token_times_ms;
  if (tau.empty()) return l;
  l.ttft_ms = tau.front() - record.arrival_ms;
  l.e2e_ms = tau.back() - record.arrival_ms;
  if (tau.size() >= 2) {
    l.ttst_ms = tau[1] - tau[0];
    l.tpot_ms = (tau.back() - tau.front()) / static_cast<double>(tau.size() - 1);
  }
  return l;
}

RequestHandle ReplayCollector::onArrival(RequestInfo info, double arrival_ms) {
  RequestRecord r;
  r.info = std::move(info);
  r.arrival_ms = arrival_ms;
  requests_.push_back(std::move(r));
  return requests_.size() - 1;
}

RequestRecord& ReplayCollector::record(RequestHandle request) {
  MOCKER_CHECK_MSG(request < requests_.size(), "unknown request handle");
  return requests_[request];
}

void ReplayCollector::onInputLength(RequestHandle request, std::uint32_t input_length) {
  record(request).info.input_length = input_length;
}

void ReplayCollector::onAdmission(RequestHandle request, double time_ms,
                                  std::uint32_t reused_input_tokens, bool is_readmission) {
  RequestRecord& r = record(request);
  if (!r.first_admit_ms) {
    r.first_admit_ms = time_ms;
    r.first_reused_input_tokens = reused_input_tokens;
  }
  (void)is_readmission;  // admission_count already distinguishes first admission from re-
  r.last_reused_input_tokens = reused_input_tokens;
  ++r.admission_count;
}

void ReplayCollector::onMigration(RequestHandle request) { ++record(request).migrations; }

void ReplayCollector::onToken(RequestHandle request, double time_ms) {
  // Grows with the tokens actually emitted, never sized from the requested output length.
  record(request).token_times_ms.push_back(time_ms);
}

void ReplayCollector::onTerminal(RequestHandle request, double time_ms, TerminalStatus status,
                                 StopReason reason) {
  RequestRecord& r = record(request);
  if (r.terminal_ms || status == TerminalStatus::Incomplete) return;
  r.status = status;
  r.stop_reason = reason;
  r.terminal_ms = time_ms;
}

void ReplayCollector::onEngineSample(const EngineSample& sample) {
  if (options_.keep_engine_samples) samples_.push_back(sample);
  if (!peak_kv_usage_ || sample.kv_usage > *peak_kv_usage_) peak_kv_usage_ = sample.kv_usage;
  const std::uint32_t rank = sample.dp_rank;
  auto it = rank < preemptions_by_rank_.size() && preemptions_by_rank_[rank].first == rank
                ? preemptions_by_rank_.begin() + rank
                : std::lower_bound(preemptions_by_rank_.begin(), preemptions_by_rank_.end(),
                                   std::make_pair(rank, std::uint64_t{0}));
  if (it == preemptions_by_rank_.end() || it->first != rank) {
    it = preemptions_by_rank_.insert(it, {rank, 0});
  }
  it->second = std::max(it->second, sample.preemptions_total);
}

namespace {

std::optional<double> perSecond(double amount, std::optional<double> duration_ms) {
  if (!duration_ms || *duration_ms <= 0.0) return std::nullopt;
  return amount / (*duration_ms / 1000.0);
}

}  // namespace

namespace {

/// Per-adapter rows (Report::adapters); empty when no request names an adapter.
std::vector<AdapterReport> adapterReports(const std::vector<RequestRecord>& requests) {
  const bool any = std::any_of(requests.begin(), requests.end(),
                               [](const RequestRecord& r) { return r.info.lora.has_value(); });
  if (!any) return {};
  struct Acc {
    AdapterReport row;
    std::uint64_t input = 0, reused = 0;
    std::vector<double> ttft, e2e;
  };
  std::map<std::optional<std::string>, Acc> by;  // nullopt (the base model) sorts first
  for (const RequestRecord& r : requests) {
    Acc& a = by[r.info.lora];
    ++a.row.requests;
    if (r.status != TerminalStatus::Completed) continue;
    ++a.row.completed_requests;
    a.input += r.info.input_length;
    a.reused += r.last_reused_input_tokens;
    const RequestLatencies l = latenciesOf(r);
    if (l.ttft_ms) a.ttft.push_back(*l.ttft_ms);
    if (l.e2e_ms) a.e2e.push_back(*l.e2e_ms);
  }
  std::vector<AdapterReport> out;
  for (auto& [name, a] : by) {
    a.row.adapter = name;
    if (!a.ttft.empty()) a.row.ttft_p50_ms = summarize(std::move(a.ttft)).p50;
    if (!a.e2e.empty()) a.row.e2e_p50_ms = summarize(std::move(a.e2e)).p50;
    if (a.input > 0) {
      a.row.prefix_cache_reused_ratio =
          static_cast<double>(a.reused) / static_cast<double>(a.input);
    }
    out.push_back(std::move(a.row));
  }
  return out;
}

}  // namespace

Report ReplayCollector::buildReport(const ReportOptions& options) const {
  Report rep;
  rep.num_requests = requests_.size();
  // The pooled gaps dominate: size that vector once instead of growing it token by token.
  std::size_t num_completed = 0;
  std::size_t num_gaps = 0;
  for (const RequestRecord& r : requests_) {
    if (r.status != TerminalStatus::Completed) continue;
    ++num_completed;
    if (!r.token_times_ms.empty()) num_gaps += r.token_times_ms.size() - 1;
  }
  std::vector<double> ttft, ttst, tpot, itl, e2e;
  for (std::vector<double>* v : {&ttft, &ttst, &tpot, &e2e}) v->reserve(num_completed);
  itl.reserve(num_gaps);
  std::optional<double> first_arrival;
  std::optional<double> last_terminal;
  std::uint64_t reused_last = 0;
  std::uint64_t reused_first = 0;
  std::uint64_t good = 0;
  std::uint64_t good_output = 0;

  for (const RequestRecord& r : requests_) {
    if (!first_arrival || r.arrival_ms < *first_arrival) first_arrival = r.arrival_ms;
    if (r.terminal_ms && (!last_terminal || *r.terminal_ms > *last_terminal)) {
      last_terminal = r.terminal_ms;
    }
    if (r.migrations > 0) ++rep.migrated_requests;
    switch (r.status) {
      case TerminalStatus::Completed:
        ++rep.completed_requests;
        rep.cut_short_by.add(r.stop_reason);
        break;
      case TerminalStatus::Rejected:
        ++rep.rejected_requests;
        rep.rejected_by.add(r.stop_reason);
        continue;
      case TerminalStatus::Cancelled:
        ++rep.cancelled_requests;
        continue;
      case TerminalStatus::Failed:
        ++rep.failed_requests;
        continue;
      case TerminalStatus::Incomplete:
        ++rep.incomplete_requests;
        continue;
    }
    // Completed requests only from here on.
    rep.total_input_tokens += r.info.input_length;
    rep.total_output_tokens += r.token_times_ms.size();
    reused_last += r.last_reused_input_tokens;
    reused_first += r.first_reused_input_tokens;
    const RequestLatencies l = latenciesOf(r);
    if (l.ttft_ms) ttft.push_back(*l.ttft_ms);
    if (l.e2e_ms) e2e.push_back(*l.e2e_ms);
    if (l.ttst_ms) ttst.push_back(*l.ttst_ms);
    if (l.tpot_ms) tpot.push_back(*l.tpot_ms);
    for (std::size_t k = 1; k < r.token_times_ms.size(); ++k) {
      itl.push_back(r.token_times_ms[k] - r.token_times_ms[k - 1]);
    }
    if (options.slo.any()) {
      const SloSpec& s = options.slo;
      const bool ok = (!s.ttft_ms || (l.ttft_ms && *l.ttft_ms <= *s.ttft_ms)) &&
                      (!s.e2e_ms || (l.e2e_ms && *l.e2e_ms <= *s.e2e_ms)) &&
                      (!s.tpot_ms || !l.tpot_ms || *l.tpot_ms <= *s.tpot_ms);
      if (ok) {
        ++good;
        good_output += r.token_times_ms.size();
      }
    }
  }

  if (first_arrival && last_terminal) rep.duration_ms = *last_terminal - *first_arrival;
  rep.wall_time_ms = options.wall_time_ms;
  const auto in = static_cast<double>(rep.total_input_tokens);
  const auto out = static_cast<double>(rep.total_output_tokens);
  rep.request_throughput_rps =
      perSecond(static_cast<double>(rep.completed_requests), rep.duration_ms);
  rep.input_throughput_tok_s = perSecond(in, rep.duration_ms);
  rep.output_throughput_tok_s = perSecond(out, rep.duration_ms);
  rep.total_throughput_tok_s = perSecond(in + out, rep.duration_ms);
  rep.processed_tokens_per_s = perSecond(in + out, rep.wall_time_ms);
  if (rep.total_input_tokens > 0) {
    rep.prefix_cache_reused_ratio = static_cast<double>(reused_last) / in;
    rep.first_admission_prefix_cache_reused_ratio = static_cast<double>(reused_first) / in;
  }
  rep.ttft = summarize(std::move(ttft));
  rep.ttst = summarize(std::move(ttst));
  rep.tpot = summarize(std::move(tpot));
  rep.e2e_latency = summarize(std::move(e2e));
  sortSamples(itl);
  rep.itl = summarizeSorted(itl);
  // x ↦ 1000/x is non-increasing on x > 0, so the sorted positive gaps read from the largest
  // down give the per-user rates already sorted ascending (ties are bit-identical): no second
  // sort, and the same values in the same order as sorting them would give. Done in place, as
  // the gaps are no longer needed.
  const auto num_positive =
      static_cast<std::size_t>(itl.end() - std::upper_bound(itl.begin(), itl.end(), 0.0));
  std::reverse(itl.begin(), itl.end());
  itl.resize(num_positive);
  for (double& gap : itl) gap = 1000.0 / gap;
  rep.output_token_throughput_per_user = summarizeSorted(itl);

  rep.adapters = adapterReports(requests_);
  for (const auto& [rank, preemptions] : preemptions_by_rank_) rep.total_preemptions += preemptions;
  rep.peak_kv_usage = peak_kv_usage_;
  if (options.slo.any()) {
    Goodput g;
    g.slo = options.slo;
    g.completed_requests = good;
    g.request_throughput_rps = perSecond(static_cast<double>(good), rep.duration_ms);
    g.output_throughput_tok_s = perSecond(static_cast<double>(good_output), rep.duration_ms);
    rep.goodput = g;
  }
  return rep;
}

}  // namespace mocker::replay
