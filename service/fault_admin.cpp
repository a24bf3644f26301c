// The fault admin interface (fault_admin.h): requests parsed and checked on the HTTP thread,
// commands handed to the loops through their boxes.
#include "service/fault_admin.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "service/logging.h"

namespace mocker::service {
namespace {

constexpr std::string_view kPaths = "GET/POST /admin/faults, DELETE /admin/faults/{id}";
/// Longest piece of a hostile request echoed back in an error.
constexpr std::size_t kMaxEcho = 120;

bool printableAscii(char c) { return c >= ' ' && c < 127; }

/// A piece of the request, echoed in an error: at most kMaxEcho bytes, anything but printable
/// ASCII shown as '?' (the answer stays valid UTF-8 JSON whatever the client sent).
std::string quoted(std::string_view text) {
  std::string shown(text.substr(0, kMaxEcho));
  std::replace_if(
      shown.begin(), shown.end(), [](char c) { return !printableAscii(c); }, '?');
  std::string out = "'";
  out += jsonEscape(shown);
  if (text.size() > kMaxEcho) out += "...";
  out += "'";
  return out;
}

FaultAdmin::Reply error(int status, const std::string& message) {
  return {.status = status, .body = "{\"error\":\"" + jsonEscape(message) + "\"}\n"};
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

/// The trigger of a spec as listed: its trigger and rate keys, or when it fires without them.
std::string triggerText(const FaultSpec& s) {
  std::string text = faultSpecText(s);
  std::string out;
  std::size_t at = text.find(':');
  while (at != std::string::npos) {
    const std::size_t next = text.find(':', at + 1);
    const std::string item = text.substr(at + 1, next == std::string::npos ? next : next - at - 1);
    for (const char* key :
         {"after_passes=", "at_ms=", "for_passes=", "count=", "rate=", "match="}) {
      if (item.starts_with(key)) out += (out.empty() ? "" : ":") + item;
    }
    at = next;
  }
  if (!out.empty()) return out;
  if (isWorkerFault(s.kind)) return "next pass";
  if (isKvFault(s.kind)) return "next KV-event batch";
  if (isFetchFault(s.kind)) return "every kv_fetch";
  return "every request";
}

std::string scopeText(const FaultSpec& s) {
  return "{\"worker\":" + (s.worker ? std::to_string(*s.worker) : std::string("\"all\"")) +
         ",\"rank\":" + (s.rank ? std::to_string(*s.rank) : std::string("\"all\"")) + "}";
}

std::string workerList(const std::vector<std::uint32_t>& workers) {
  std::string out;
  for (const std::uint32_t w : workers) out += (out.empty() ? "" : ", ") + std::to_string(w);
  return out;
}

}  // namespace

Result<std::string> loadAdminKey(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrorCode::IoError, "faults.admin_key_file '" + path + "': cannot read"};
  std::ostringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  const std::string key(trim(all));
  if (key.size() < kMinAdminKeyBytes) {
    return invalidArgument("faults.admin_key_file '" + path + "': the key must be at least " +
                           std::to_string(kMinAdminKeyBytes) + " characters (got " +
                           std::to_string(key.size()) + ")");
  }
  if (!std::all_of(key.begin(), key.end(), [](char c) { return c > ' ' && c < 127; })) {
    return invalidArgument("faults.admin_key_file '" + path +
                           "': the key must be printable ASCII without spaces");
  }
  return key;
}

bool sameKey(std::string_view presented, std::string_view expected) {
  // Every byte of the expected key is looked at whatever the presented one holds.
  unsigned diff = presented.size() == expected.size() ? 0U : 1U;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const char p = i < presented.size() ? presented[i] : '\0';
    diff |= static_cast<unsigned char>(p ^ expected[i]);
  }
  return diff == 0;
}

FaultAdmin::FaultAdmin(Options options)
    : options_(std::move(options)), next_id_(options_.first_id) {
  for (std::uint32_t w = 0; w < options_.num_workers; ++w) {
    boxes_.push_back(std::make_unique<Box>());
  }
}

FaultAdmin::Reply FaultAdmin::handle(std::string_view method, std::string_view target,
                                     std::string_view body, std::string_view authorization) {
  if (!options_.key.empty()) {
    constexpr std::string_view kScheme = "Bearer ";
    const bool bearer =
        authorization.size() > kScheme.size() &&
        std::equal(kScheme.begin(), kScheme.end(), authorization.begin(),
                   [](char a, char b) { return std::tolower(a) == std::tolower(b); });
    if (!bearer || !sameKey(trim(authorization.substr(kScheme.size())), options_.key)) {
      Reply r = error(401, authorization.empty()
                               ? "authorization required: send 'Authorization: Bearer KEY' "
                                 "(the key of [faults] admin_key_file)"
                               : "wrong bearer key, or not 'Authorization: Bearer KEY'");
      r.unauthorized = true;
      return r;
    }
  }
  const std::size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  constexpr std::string_view kFaults = "/admin/faults";
  if (path == kFaults) {
    if (method == "GET") {
      if (!query.empty())
        return error(400, "GET /admin/faults takes no query (got " + quoted(query) + ")");
      return list();
    }
    if (method == "POST") return arm(query, body);
    Reply r = error(405, "method " + quoted(method) + " not allowed on /admin/faults (GET, POST)");
    r.allow = "GET, POST";
    return r;
  }
  if (path.starts_with(kFaults) && path.size() > kFaults.size() + 1 &&
      path[kFaults.size()] == '/') {
    if (method == "DELETE") {
      if (!query.empty()) return error(400, "DELETE takes no query (got " + quoted(query) + ")");
      return disarm(path.substr(kFaults.size() + 1));
    }
    Reply r =
        error(405, "method " + quoted(method) + " not allowed on /admin/faults/{id} (DELETE)");
    r.allow = "DELETE";
    return r;
  }
  return error(404, "no admin path " + quoted(path) + " (" + std::string(kPaths) + ")");
}

FaultAdmin::Reply FaultAdmin::list() const {
  struct Entry {
    FaultSpec spec;
    std::uint64_t fired = 0;
    bool runtime = false;
    std::string workers;
  };
  std::map<std::uint32_t, Entry> merged;
  {
    const std::lock_guard lock(mutex_);
    for (std::uint32_t w = 0; w < boxes_.size(); ++w) {
      const Box& box = *boxes_[w];
      for (const Listed& l : box.listing) {
        Entry& e = merged[l.info.id];
        e.spec = l.info.spec;
        e.fired += l.fired;
        e.runtime = l.info.armed_at_pass.has_value();
        e.workers += e.workers.empty() ? "" : ",";
        e.workers += "{\"worker\":" + std::to_string(w) +
                     ",\"running\":" + (box.closed ? "false" : "true") + ",\"armed_at_pass\":" +
                     (l.info.armed_at_pass ? std::to_string(*l.info.armed_at_pass) : "null") +
                     ",\"fired\":" + std::to_string(l.fired) + "}";
      }
    }
  }
  std::string body = "{\"faults\":[";
  bool first = true;
  for (const auto& [id, e] : merged) {
    body += first ? "" : ",";
    first = false;
    body += "{\"id\":" + std::to_string(id) + ",\"kind\":\"" +
            std::string(faultKindName(e.spec.kind)) + "\",\"spec\":\"" +
            jsonEscape(faultSpecText(e.spec)) + "\",\"trigger\":\"" +
            jsonEscape(triggerText(e.spec)) + "\",\"scope\":" + scopeText(e.spec) +
            ",\"source\":\"" + (e.runtime ? "admin" : "config") +
            "\",\"fired\":" + std::to_string(e.fired) + ",\"workers\":[" + e.workers + "]}";
  }
  body += "]}\n";
  return {.status = 200, .body = std::move(body)};
}

FaultAdmin::Reply FaultAdmin::arm(std::string_view query, std::string_view body) {
  const bool all = query == "workers=all";
  if (!query.empty() && !all) {
    return error(400, "unknown query " + quoted(query) + " (POST /admin/faults takes workers=all)");
  }
  if (body.size() > kMaxAdminBodyBytes) {
    return error(413, "body over " + std::to_string(kMaxAdminBodyBytes) + " bytes");
  }
  const std::string_view text = trim(body);
  if (text.empty()) {
    return error(400, "empty body: expected one fault spec KIND[:KEY=VALUE]... (as --fault)");
  }
  if (const auto bad = std::find_if_not(text.begin(), text.end(), printableAscii);
      bad != text.end()) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(*bad));
    return error(400, "the body must be one fault spec in printable ASCII: byte " +
                          std::string(byte) + " at offset " +
                          std::to_string(bad - text.begin() + (text.data() - body.data())));
  }
  auto specs = parseFaultSpecs({std::string(text)}, options_.num_workers, options_.dp_size);
  if (!specs) return error(400, specs.error().message);
  FaultSpec spec = std::move(specs->front());
  std::vector<std::uint32_t> workers;
  if (spec.worker) {
    if (all) return error(400, "give worker=I in the spec or ?workers=all, not both");
    workers.push_back(*spec.worker);
  } else if (options_.num_workers > 1 && !all) {
    return error(400, "a fleet of " + std::to_string(options_.num_workers) +
                          " workers: say which the fault is armed on, worker=I in the spec, or "
                          "every worker with POST /admin/faults?workers=all");
  } else {
    for (std::uint32_t w = 0; w < options_.num_workers; ++w) workers.push_back(w);
  }
  std::uint32_t id = 0;
  {
    const std::lock_guard lock(mutex_);
    id = next_id_++;
  }
  const std::string text_c = faultSpecText(spec);
  const std::vector<Answer> answers =
      dispatch({.op = Command::Op::Arm, .id = id, .spec = std::move(spec)}, workers);
  std::string armed;
  std::vector<std::uint32_t> missing;
  for (const Answer& a : answers) {
    if (!a.done) {
      missing.push_back(a.worker);
      continue;
    }
    armed += armed.empty() ? "" : ",";
    armed += "{\"worker\":" + std::to_string(a.worker) +
             ",\"armed_at_pass\":" + std::to_string(a.value) + "}";
  }
  std::string out = "{\"id\":" + std::to_string(id) + ",\"spec\":\"" + jsonEscape(text_c) +
                    "\",\"workers\":[" + armed + "]";
  if (missing.empty()) return {.status = 201, .body = out + "}\n"};
  out += ",\"error\":\"not armed on worker(s) " + workerList(missing) +
         ": not running (crashed or stopped) or did not answer in time\"}\n";
  return {.status = 503, .body = std::move(out)};
}

FaultAdmin::Reply FaultAdmin::disarm(std::string_view id_text) {
  std::uint32_t id = 0;
  const auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
  if (ec != std::errc{} || end != id_text.data() + id_text.size()) {
    return error(400, "fault id must be an unsigned integer (got " + quoted(id_text) + ")");
  }
  std::vector<std::uint32_t> holders;
  {
    const std::lock_guard lock(mutex_);
    for (std::uint32_t w = 0; w < boxes_.size(); ++w) {
      const auto& l = boxes_[w]->listing;
      if (!boxes_[w]->closed &&
          std::any_of(l.begin(), l.end(), [id](const Listed& x) { return x.info.id == id; })) {
        holders.push_back(w);
      }
    }
  }
  if (holders.empty()) {
    return error(404, "no fault " + std::to_string(id) + " is armed on a running worker");
  }
  const std::vector<Answer> answers = dispatch({.op = Command::Op::Disarm, .id = id}, holders);
  std::string done;
  std::vector<std::uint32_t> missing;
  for (const Answer& a : answers) {
    if (a.done && a.value == 1) {
      done += (done.empty() ? "" : ",") + std::to_string(a.worker);
    } else if (!a.done) {
      missing.push_back(a.worker);
    }
  }
  std::string out = "{\"id\":" + std::to_string(id) + ",\"disarmed_on\":[" + done + "]";
  if (missing.empty()) return {.status = 200, .body = out + "}\n"};
  out += ",\"error\":\"not disarmed on worker(s) " + workerList(missing) +
         ": not running or did not answer in time\"}\n";
  return {.status = 503, .body = std::move(out)};
}

std::vector<FaultAdmin::Answer> FaultAdmin::dispatch(Command command,
                                                     const std::vector<std::uint32_t>& workers) {
  std::unique_lock lock(mutex_);
  std::vector<std::uint64_t> tickets;
  std::vector<Answer> out;
  for (const std::uint32_t w : workers) {
    Box& box = *boxes_[w];
    if (box.closed) {
      out.push_back({.worker = w, .done = false});
      continue;
    }
    command.ticket = next_ticket_++;
    tickets.push_back(command.ticket);
    box.queue.push_back(command);
    box.wake.notify();
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.answer_timeout;
  const auto take = [&] {
    for (auto it = answers_.begin(); it != answers_.end();) {
      if (std::find(tickets.begin(), tickets.end(), it->ticket) != tickets.end()) {
        out.push_back(*it);
        tickets.erase(std::find(tickets.begin(), tickets.end(), it->ticket));
        it = answers_.erase(it);
      } else {
        ++it;
      }
    }
    return tickets.empty();
  };
  answered_.wait_until(lock, deadline, take);
  // Commands still queued at the deadline are taken back: never applied later, unseen.
  for (const std::uint64_t t : tickets) {
    for (std::uint32_t w = 0; w < boxes_.size(); ++w) {
      auto& q = boxes_[w]->queue;
      const auto it =
          std::find_if(q.begin(), q.end(), [t](const Command& c) { return c.ticket == t; });
      if (it == q.end()) continue;
      q.erase(it);
      out.push_back({.ticket = t, .worker = w, .done = false});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Answer& a, const Answer& b) { return a.worker < b.worker; });
  return out;
}

void FaultAdmin::applyCommands(std::uint32_t worker,
                               const std::function<std::uint64_t(const Command&)>& apply,
                               const std::function<std::vector<Listed>()>& listing) {
  Box& box = *boxes_[worker];
  box.wake.drain();
  const std::lock_guard lock(mutex_);  // applying is a few vector operations: held throughout
  if (box.queue.empty()) return;
  while (!box.queue.empty()) {
    const Command& c = box.queue.front();
    answers_.push_back({.ticket = c.ticket, .worker = worker, .done = true, .value = apply(c)});
    box.queue.pop_front();
  }
  box.listing = listing();
  answered_.notify_all();
}

void FaultAdmin::publish(std::uint32_t worker, std::vector<Listed> listing) {
  const std::lock_guard lock(mutex_);
  boxes_[worker]->listing = std::move(listing);
}

void FaultAdmin::close(std::uint32_t worker) {
  const std::lock_guard lock(mutex_);
  Box& box = *boxes_[worker];
  box.closed = true;
  for (const Command& c : box.queue) {
    answers_.push_back({.ticket = c.ticket, .worker = worker, .done = false});
  }
  box.queue.clear();
  answered_.notify_all();
}

}  // namespace mocker::service
