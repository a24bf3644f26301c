#include "gateway/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <optional>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "gateway/detail/pcre_splitter.h"

namespace mocker::gateway {
namespace {

using json = nlohmann::json;

/// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// GPT-2's byte → printable code point map (the ByteLevel alphabet).
std::array<char32_t, 256> byteToCodePoint() {
  std::array<char32_t, 256> map{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b) printable[static_cast<std::size_t>(b)] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[static_cast<std::size_t>(b)] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[static_cast<std::size_t>(b)] = true;
  char32_t next = 256;
  for (std::size_t b = 0; b < 256; ++b) map[b] = printable[b] ? static_cast<char32_t>(b) : next++;
  return map;
}

void appendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// The code point at s[i] (advancing i); a malformed byte is returned as itself.
char32_t nextCodePoint(std::string_view s, std::size_t& i) {
  const auto lead = static_cast<unsigned char>(s[i++]);
  std::size_t extra = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  char32_t cp = extra == 3   ? lead & 0x07u
                : extra == 2 ? lead & 0x0Fu
                : extra == 1 ? lead & 0x1Fu
                             : lead;
  for (; extra > 0 && i < s.size(); --extra) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3Fu);
  }
  return cp;
}

std::string typeOf(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string();
}

}  // namespace

struct HfTokenizer::Impl {
  struct PreStep {
    std::optional<detail::PcreSplitter> splitter;  // none: ByteLevel without its regex
    bool add_prefix_space = false;
  };
  std::unordered_map<std::string, std::uint32_t> vocab;      // token text (alphabet) → id
  std::unordered_map<std::uint32_t, std::string> bytes;      // id → its bytes (added: content)
  std::unordered_map<std::string, std::uint32_t> ranks;      // "a b" → merge rank
  std::vector<std::pair<std::string, std::uint32_t>> added;  // content → id
  std::vector<PreStep> steps;
  std::vector<std::uint32_t> prefix;  // post-processor: special tokens before the text
  std::vector<std::uint32_t> suffix;  // and after it
  std::vector<std::uint32_t> outputs;
  bool ignore_merges = false;
  std::array<std::string, 256> byte_chars;  // UTF-8 of each byte's alphabet character
  std::unordered_map<char32_t, unsigned char> char_byte;

  void encodeText(std::string_view text, std::vector<std::uint32_t>& ids) const;
  void encodeSegment(std::string_view text, std::vector<std::uint32_t>& ids) const;
  void bpe(std::string_view piece, std::vector<std::uint32_t>& ids) const;
  Status parseModel(const json& model);
  Status parsePreTokenizer(const json& pre);
  Status parsePostProcessor(const json& post);
  void chooseOutputs();
};

void HfTokenizer::Impl::encodeText(std::string_view text, std::vector<std::uint32_t>& ids) const {
  // Added tokens first: the leftmost occurrence, the longest there; the text between is encoded.
  // Each token's next occurrence is remembered and searched again only once passed, so a text
  // full of added tokens costs O(text · tokens), not quadratic.
  constexpr std::size_t kNone = std::string_view::npos;
  std::vector<std::size_t> next(added.size(), 0);
  std::vector<bool> searched(added.size(), false);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t best_at = kNone;
    std::size_t best = 0;
    for (std::size_t k = 0; k < added.size(); ++k) {
      if (!searched[k] || (next[k] != kNone && next[k] < pos)) {
        next[k] = text.find(added[k].first, pos);
        searched[k] = true;
      }
      const std::size_t at = next[k];
      if (at == kNone) continue;
      if (at < best_at || (at == best_at && added[k].first.size() > added[best].first.size())) {
        best_at = at;
        best = k;
      }
    }
    if (best_at == kNone) break;
    encodeSegment(text.substr(pos, best_at - pos), ids);
    ids.push_back(added[best].second);
    pos = best_at + added[best].first.size();
  }
  encodeSegment(text.substr(std::min(pos, text.size())), ids);
}

void HfTokenizer::Impl::encodeSegment(std::string_view text,
                                      std::vector<std::uint32_t>& ids) const {
  if (text.empty()) return;
  std::string prefixed;
  std::vector<std::string_view> pieces{text};
  std::vector<std::string_view> next;
  for (const PreStep& step : steps) {
    if (step.add_prefix_space && !pieces.empty() && !pieces.front().starts_with(' ') &&
        prefixed.empty()) {
      // The first piece of the text gains a space (ByteLevel's add_prefix_space).
      // Built by appending: GCC 12 reports a false -Wrestrict on " " + std::string.
      prefixed.assign(1, ' ');
      prefixed.append(pieces.front());
      pieces.front() = prefixed;
    }
    if (!step.splitter) continue;
    next.clear();
    for (const std::string_view p : pieces) step.splitter->split(p, next);
    pieces.swap(next);
  }
  for (const std::string_view p : pieces) bpe(p, ids);
}

void HfTokenizer::Impl::bpe(std::string_view piece, std::vector<std::uint32_t>& ids) const {
  // Symbols as a linked list over the piece; a min-heap of candidate merges by (rank, left
  // position) — the order the tokenizers library applies them — so a long word costs
  // O(n log n), not O(n²). A heap entry is stale once either side changed (lengths differ).
  struct Symbol {
    std::string text;
    std::size_t prev = 0, next = 0;  // next == size: none; prev == size: none
    bool alive = true;
  };
  const std::size_t n = piece.size();
  std::vector<Symbol> sym(n);
  for (std::size_t i = 0; i < n; ++i) {
    sym[i] = {byte_chars[static_cast<unsigned char>(piece[i])], i == 0 ? n : i - 1, i + 1, true};
  }
  if (ignore_merges) {
    std::string whole;
    for (const auto& s : sym) whole += s.text;
    if (const auto it = vocab.find(whole); it != vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  struct Candidate {
    std::uint32_t rank;
    std::size_t left, right, left_len, right_len;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  std::string key;
  auto consider = [&](std::size_t left) {
    if (left >= n || sym[left].next >= n) return;
    const std::size_t right = sym[left].next;
    key.assign(sym[left].text).append(" ").append(sym[right].text);
    if (const auto it = ranks.find(key); it != ranks.end()) {
      heap.push({it->second, left, right, sym[left].text.size(), sym[right].text.size()});
    }
  };
  for (std::size_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    if (!l.alive || !r.alive || l.next != c.right || l.text.size() != c.left_len ||
        r.text.size() != c.right_len) {
      continue;  // stale
    }
    l.text += r.text;
    r.alive = false;
    l.next = r.next;
    if (r.next < n) sym[r.next].prev = c.left;
    if (l.prev < n) consider(l.prev);
    consider(c.left);
  }
  for (std::size_t i = 0; i < n; i = sym[i].next) {
    if (const auto it = vocab.find(sym[i].text); it != vocab.end()) ids.push_back(it->second);
    // Unreachable for a validated byte-level vocabulary (every byte character is a token).
  }
}

Status HfTokenizer::Impl::parseModel(const json& model) {
  if (typeOf(model) != "BPE") {
    return invalidArgument("model.type: only BPE is supported, got '" + typeOf(model) + "'");
  }
  if (model.value("byte_fallback", false)) {
    return invalidArgument("model.byte_fallback: not supported (a byte-level BPE has no need)");
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(field) && !model[field].is_null() &&
        !(model[field].is_string() && model[field].get<std::string>().empty())) {
      return invalidArgument(std::string("model.") + field + ": not supported");
    }
  }
  if (model.contains("ignore_merges") && model["ignore_merges"].is_boolean()) {
    ignore_merges = model["ignore_merges"].get<bool>();
  }
  const json& v = model.value("vocab", json());
  if (!v.is_object() || v.empty()) return invalidArgument("model.vocab: expected an object");
  for (const auto& [token, id] : v.items()) {
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() > 0xFFFF'FFFFull) {
      return invalidArgument("model.vocab['" + token + "']: expected a token id");
    }
    vocab.emplace(token, id.get<std::uint32_t>());
  }
  for (std::size_t b = 0; b < 256; ++b) {
    if (!vocab.contains(byte_chars[b])) {
      return invalidArgument("model.vocab: byte " + std::to_string(b) +
                             " has no token: not a byte-level vocabulary");
    }
  }
  const json& m = model.value("merges", json());
  if (!m.is_array()) return invalidArgument("model.merges: expected a list");
  for (std::size_t r = 0; r < m.size(); ++r) {
    std::string pair;
    if (m[r].is_string()) {
      pair = m[r].get<std::string>();
    } else if (m[r].is_array() && m[r].size() == 2 && m[r][0].is_string() && m[r][1].is_string()) {
      pair = m[r][0].get<std::string>() + " " + m[r][1].get<std::string>();
    }
    if (pair.find(' ') == std::string::npos) {
      return invalidArgument("model.merges[" + std::to_string(r) + "]: expected \"a b\" or [a, b]");
    }
    ranks.emplace(std::move(pair), static_cast<std::uint32_t>(r));
  }
  for (const auto& [token, id] : vocab) {
    std::string out;
    for (std::size_t i = 0; i < token.size();) {
      const char32_t cp = nextCodePoint(token, i);
      const auto it = char_byte.find(cp);
      if (it != char_byte.end()) {
        out.push_back(static_cast<char>(it->second));
      } else {
        appendUtf8(out, cp);  // not of the alphabet: kept as it is
      }
    }
    bytes.emplace(id, std::move(out));
  }
  return {};
}

Status HfTokenizer::Impl::parsePreTokenizer(const json& pre) {
  const std::string type = typeOf(pre);
  if (pre.is_null()) return {};
  if (type == "Sequence") {
    for (const json& p : pre.value("pretokenizers", json::array())) {
      MOCKER_TRY_VOID(parsePreTokenizer(p));
    }
    return {};
  }
  if (type == "ByteLevel") {
    PreStep step{.add_prefix_space = pre.value("add_prefix_space", false)};
    if (pre.value("use_regex", true)) {
      MOCKER_TRY(step.splitter, detail::PcreSplitter::compile(kGpt2Regex, true));
    }
    steps.push_back(std::move(step));
    return {};
  }
  if (type == "Split") {
    const json& pattern = pre.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) {
      return invalidArgument("pre_tokenizer Split: only {\"Regex\": ...} patterns are supported");
    }
    const std::string behavior = pre.value("behavior", std::string());
    if ((behavior != "Isolated" && behavior != "Removed") || pre.value("invert", false)) {
      return invalidArgument("pre_tokenizer Split: behavior '" + behavior +
                             "' (or invert) not supported: Isolated or Removed, invert false");
    }
    PreStep step;
    MOCKER_TRY(step.splitter, detail::PcreSplitter::compile(pattern["Regex"].get<std::string>(),
                                                            behavior == "Isolated"));
    steps.push_back(std::move(step));
    return {};
  }
  return invalidArgument("pre_tokenizer: type '" + type +
                         "' not supported (ByteLevel, Split, Sequence)");
}

Status HfTokenizer::Impl::parsePostProcessor(const json& post) {
  const std::string type = typeOf(post);
  if (post.is_null() || type == "ByteLevel") return {};
  if (type == "Sequence") {
    for (const json& p : post.value("processors", json::array())) {
      MOCKER_TRY_VOID(parsePostProcessor(p));
    }
    return {};
  }
  if (type != "TemplateProcessing") {
    return invalidArgument("post_processor: type '" + type +
                           "' not supported (ByteLevel, TemplateProcessing, Sequence)");
  }
  bool seen_sequence = false;
  for (const json& item : post.value("single", json::array())) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const json& special = item.value("SpecialToken", json());
    const std::string name = special.value("id", std::string());
    const json& tokens = post.value("special_tokens", json::object());
    if (!tokens.contains(name) || !tokens[name].contains("ids") || tokens[name]["ids"].empty()) {
      return invalidArgument("post_processor TemplateProcessing: special token '" + name +
                             "' has no ids");
    }
    for (const json& id : tokens[name]["ids"]) {
      (seen_sequence ? suffix : prefix).push_back(id.get<std::uint32_t>());
    }
  }
  return {};
}

void HfTokenizer::Impl::chooseOutputs() {
  std::vector<std::uint32_t> ids;
  for (const auto& [id, text] : bytes) {
    if (text.size() < 2 || text[0] != ' ') continue;
    if (!std::all_of(text.begin() + 1, text.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); })) {
      continue;
    }
    ids.clear();
    encodeText(text, ids);
    if (ids != std::vector<std::uint32_t>{id}) continue;
    ids.clear();
    encodeText(text + text, ids);
    if (ids == std::vector<std::uint32_t>{id, id}) outputs.push_back(id);
  }
  std::sort(outputs.begin(), outputs.end());
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::parse(std::string_view json_text,
                                                        const std::string& source) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  auto fail = [&](const Error& e) {
    return Error{ErrorCode::InvalidArgument, "--tokenizer " + source + ": " + e.message};
  };
  if (!root.is_object()) return fail(invalidArgument("not a JSON object (tokenizer.json)"));
  auto impl = std::make_unique<Impl>();
  const auto map = byteToCodePoint();
  for (std::size_t b = 0; b < 256; ++b) {
    appendUtf8(impl->byte_chars[b], map[b]);
    impl->char_byte.emplace(map[b], static_cast<unsigned char>(b));
  }
  const json& normalizer = root.value("normalizer", json());
  if (!normalizer.is_null() && typeOf(normalizer) != "NFC") {
    return fail(invalidArgument("normalizer: type '" + typeOf(normalizer) +
                                "' not supported (null or NFC)"));
  }
  const json& decoder = root.value("decoder", json());
  if (!decoder.is_null() && typeOf(decoder) != "ByteLevel") {
    return fail(
        invalidArgument("decoder: type '" + typeOf(decoder) + "' not supported (ByteLevel)"));
  }
  if (auto s = impl->parseModel(root.value("model", json())); !s) return fail(s.error());
  if (auto s = impl->parsePreTokenizer(root.value("pre_tokenizer", json())); !s) {
    return fail(s.error());
  }
  if (auto s = impl->parsePostProcessor(root.value("post_processor", json())); !s) {
    return fail(s.error());
  }
  for (const json& a : root.value("added_tokens", json::array())) {
    if (!a.is_object() || !a.value("content", json()).is_string() ||
        !a.value("id", json()).is_number_unsigned() || a["content"].get<std::string>().empty()) {
      return fail(invalidArgument("added_tokens: expected {\"id\", \"content\"} entries"));
    }
    const auto id = a["id"].get<std::uint32_t>();
    impl->added.emplace_back(a["content"].get<std::string>(), id);
    impl->bytes[id] = a["content"].get<std::string>();
  }
  impl->chooseOutputs();
  if (impl->outputs.empty()) {
    return fail(invalidArgument(
        "no vocabulary token of the form \" word\" encodes to itself: cannot choose output "
        "tokens whose text re-tokenizes to the reported count"));
  }
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(impl)));
}

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrorCode::IoError, "--tokenizer " + path + ": cannot read it"};
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

std::vector<std::uint32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<std::uint32_t> ids = impl_->prefix;
  impl_->encodeText(text, ids);
  ids.insert(ids.end(), impl_->suffix.begin(), impl_->suffix.end());
  return ids;
}

std::vector<std::uint32_t> HfTokenizer::encodeText(std::string_view text) const {
  std::vector<std::uint32_t> ids;
  impl_->encodeText(text, ids);
  return ids;
}

std::string HfTokenizer::decode(std::span<const std::uint32_t> ids) const {
  std::string out;
  for (const std::uint32_t id : ids) out += piece(id);
  return out;
}

std::string HfTokenizer::piece(std::uint32_t id) const {
  const auto it = impl_->bytes.find(id);
  return it == impl_->bytes.end() ? std::string() : it->second;
}

std::string HfTokenizer::outputText(std::span<const std::uint32_t> ids) const {
  std::string out;
  const auto& outputs = impl_->outputs;
  for (const std::uint32_t id : ids) out += impl_->bytes.at(outputs[id % outputs.size()]);
  return out;
}

const std::vector<std::uint32_t>& HfTokenizer::outputTokens() const { return impl_->outputs; }

}  // namespace mocker::gateway
