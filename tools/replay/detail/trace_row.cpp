#include "tools/replay/detail/trace_row.h"

#include <cmath>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace mocker::replay::detail {
namespace {

using nlohmann::json;

/// nlohmann SAX handler filling a Row. Never throws; errors are recorded and parsing stops.
class RowSax {
 public:
  explicit RowSax(Row& row) : row_(row) {}

  bool null() {
    if (inIds()) return badId("null");
    return scalar(Scalar{.kind = Scalar::Kind::Null});
  }
  bool boolean(bool v) {
    if (inIds()) return badId(v ? "true" : "false");
    return scalar(Scalar{.kind = Scalar::Kind::Bool, .i = v ? 1 : 0});
  }
  bool number_integer(json::number_integer_t v) {
    if (inIds()) {
      row_.ids(ids_key_).ids.push_back(std::to_string(v));
      return true;
    }
    if (inHashIds()) {
      row_.bad_hash_id.emplace(std::to_string(v));
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::Int, .i = v});
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (inIds()) {
      row_.ids(ids_key_).ids.push_back(std::to_string(v));
      return true;
    }
    if (inHashIds()) {
      row_.hash_ids.push_back(v);
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::Uint, .u = v});
  }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    if (inIds()) return badId(text);
    if (inHashIds()) {
      row_.bad_hash_id.emplace(text);
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::Float, .f = v});
  }
  bool string(json::string_t& v) {
    if (inIds()) {
      row_.ids(ids_key_).ids.push_back(std::move(v));
      return true;
    }
    if (inHashIds()) {
      row_.bad_hash_id.emplace("\"" + v + "\"");
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::String, .s = std::move(v)});
  }
  bool binary(json::binary_t&) {
    if (inIds()) return badId("binary");
    return scalar(Scalar{.kind = Scalar::Kind::Other});
  }
  bool start_object(std::size_t) {
    if (depth_ == 0) top_level_object_ = true;
    openContainer(/*is_array=*/false);
    return true;
  }
  bool key(json::string_t& k) {
    if (depth_ == 1) key_ = fieldOf(k);
    return true;
  }
  bool end_object() {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 0) {
      not_object_ = true;
      return false;
    }
    openContainer(/*is_array=*/true);
    return true;
  }
  bool end_array() {
    --depth_;
    if (depth_ == 1) {
      in_hash_ids_ = false;
      in_ids_ = false;
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    syntax_error_ = true;
    return false;
  }

  bool notObject() const { return not_object_ || (!syntax_error_ && !top_level_object_); }
  bool syntaxError() const { return syntax_error_; }

 private:
  bool inHashIds() const { return in_hash_ids_ && depth_ == 2; }
  bool inIds() const { return in_ids_ && depth_ == 2; }
  bool badId(std::string what) {
    Row::IdList& list = row_.ids(ids_key_);
    if (!list.bad) list.bad = std::move(what);
    return true;
  }

  /// A container value: at depth 1 it is the value of key_; inside hash_ids it is a bad element.
  void openContainer(bool is_array) {
    if (depth_ == 1) {
      if (key_ == kHashIds) {
        row_.hash = is_array ? Row::Hash::Array : Row::Hash::NotArray;
        row_.hash_ids.clear();  // a repeated key replaces the earlier value, as in a DOM
        row_.bad_hash_id.reset();
        in_hash_ids_ = is_array;
      } else if (key_ == kWaitFor || key_ == kBranches) {
        Row::IdList& list = row_.ids(key_);
        list = Row::IdList{};  // a repeated key replaces the earlier value, as in a DOM
        list.state = is_array ? Row::IdList::State::Array : Row::IdList::State::NotArray;
        in_ids_ = is_array;
        ids_key_ = key_;
      } else if (key_ < kNumScalarFields) {
        row_.fields[key_] = Scalar{.kind = Scalar::Kind::Other};
      }
    } else if (inHashIds()) {
      row_.bad_hash_id.emplace(is_array ? "an array" : "an object");
    } else if (inIds()) {
      badId(is_array ? "an array" : "an object");
    }
    ++depth_;
  }

  bool scalar(Scalar v) {
    if (depth_ == 0) {
      not_object_ = true;
      return false;
    }
    if (depth_ != 1) return true;  // inside an unknown key's value
    if (key_ == kHashIds) {
      row_.hash = v.kind == Scalar::Kind::Null ? Row::Hash::Null : Row::Hash::NotArray;
    } else if (key_ == kWaitFor || key_ == kBranches) {
      Row::IdList& list = row_.ids(key_);
      list = Row::IdList{};
      list.state =
          v.kind == Scalar::Kind::Null ? Row::IdList::State::Null : Row::IdList::State::NotArray;
    } else if (key_ < kNumScalarFields) {
      row_.fields[key_] = std::move(v);
    }
    return true;
  }

  Row& row_;
  std::size_t depth_ = 0;
  Field key_ = kUnknown;
  bool in_hash_ids_ = false;
  bool in_ids_ = false;
  Field ids_key_ = kWaitFor;
  bool top_level_object_ = false;
  bool not_object_ = false;
  bool syntax_error_ = false;
};

/// The Row the SAX handler would build, from the fast scanner's members (same rules: null
/// counts as absent, a repeated key keeps its last value, unknown keys are ignored).
void fillRow(const RowScratch& scratch, Row& row) {
  for (const detail::FlatMember& m : scratch.members) {
    const Field field = fieldOf(m.key);
    const detail::FlatValue& v = m.value;
    if (field == kHashIds) {
      switch (v.kind) {
        case detail::FlatValue::Kind::UintArray:
          row.hash = Row::Hash::Array;
          row.hash_ids.assign(scratch.numbers.begin() + static_cast<std::ptrdiff_t>(v.array_begin),
                              scratch.numbers.begin() + static_cast<std::ptrdiff_t>(v.array_end));
          row.bad_hash_id.reset();
          break;
        case detail::FlatValue::Kind::Null:
          row.hash = Row::Hash::Null;
          break;
        case detail::FlatValue::Kind::Uint:
        case detail::FlatValue::Kind::Float:
        case detail::FlatValue::Kind::String:
          row.hash = Row::Hash::NotArray;
          break;
      }
    } else if (field == kWaitFor || field == kBranches) {
      Row::IdList& list = row.ids(field);
      list = Row::IdList{};
      switch (v.kind) {
        case detail::FlatValue::Kind::UintArray:
          list.state = Row::IdList::State::Array;
          for (std::size_t i = v.array_begin; i < v.array_end; ++i) {
            list.ids.push_back(std::to_string(scratch.numbers[i]));
          }
          break;
        case detail::FlatValue::Kind::Null:
          list.state = Row::IdList::State::Null;
          break;
        case detail::FlatValue::Kind::Uint:
        case detail::FlatValue::Kind::Float:
        case detail::FlatValue::Kind::String:
          list.state = Row::IdList::State::NotArray;
          break;
      }
    } else if (field < kNumScalarFields) {
      switch (v.kind) {
        case detail::FlatValue::Kind::Null:
          row.fields[field] = Scalar{.kind = Scalar::Kind::Null};
          break;
        case detail::FlatValue::Kind::Uint:
          row.fields[field] = Scalar{.kind = Scalar::Kind::Uint, .u = v.uint_value};
          break;
        case detail::FlatValue::Kind::Float:
          row.fields[field] = Scalar{.kind = Scalar::Kind::Float, .f = v.float_value};
          break;
        case detail::FlatValue::Kind::String:
          row.fields[field] = Scalar{.kind = Scalar::Kind::String, .s = std::string(v.text)};
          break;
        case detail::FlatValue::Kind::UintArray:
          row.fields[field] = Scalar{.kind = Scalar::Kind::Other};
          break;
      }
    }
  }
}

}  // namespace

Field fieldOf(std::string_view key) {
  for (std::uint8_t f = 0; f < kUnknown; ++f) {
    if (key == kFieldNames[f]) return static_cast<Field>(f);
  }
  return kUnknown;
}

Status readRow(std::string_view line, Row& row, RowScratch& scratch) {
  if (scanFlatJsonObject(line, scratch.members, scratch.numbers)) {
    fillRow(scratch, row);
    return {};
  }
  RowSax sax(row);
  const bool ok = json::sax_parse(line.data(), line.data() + line.size(), &sax,
                                  json::input_format_t::json, /*strict=*/true);
  if (sax.syntaxError()) return invalidArgument("not valid JSON");
  if (sax.notObject() || !ok) return invalidArgument("expected a JSON object");
  return {};
}

/// Looks up `key` or its `alias`; null values count as absent. Both present ⇒ error.
Result<const Scalar*> findField(const Row& row, Field key, Field alias) {
  const Scalar* found = row[key].present() ? &row[key] : nullptr;
  if (alias != kUnknown && row[alias].present()) {
    if (found != nullptr) {
      return invalidArgument(std::string("both '") + kFieldNames[key] + "' and its alias '" +
                             kFieldNames[alias] + "' are present");
    }
    found = &row[alias];
  }
  return found;
}

/// A finite number >= 0 (ms).
Result<double> nonNegativeNumber(const Scalar& v, const char* name) {
  if (!v.isNumber()) return invalidArgument(std::string("'") + name + "' must be a number");
  const double d = v.asDouble();
  if (!std::isfinite(d)) return invalidArgument(std::string("'") + name + "' must be finite");
  if (d < 0.0) {
    return invalidArgument(std::string("'") + name + "' must be >= 0 (got " + v.describe() + ")");
  }
  return d;
}

/// A non-negative integer (integral floats such as 12.0 are accepted) no larger than `max`.
Result<std::uint64_t> nonNegativeInteger(const Scalar& v, const char* name, std::uint64_t max) {
  std::uint64_t value = 0;
  if (v.kind == Scalar::Kind::Uint) {
    value = v.u;
  } else if (v.kind == Scalar::Kind::Int) {
    return invalidArgument(std::string("'") + name + "' must be >= 0 (got " + v.describe() + ")");
  } else if (v.kind == Scalar::Kind::Float) {
    const double d = v.f;
    if (!std::isfinite(d) || d < 0.0 || d != std::floor(d) || d > static_cast<double>(max)) {
      return invalidArgument(std::string("'") + name + "' must be a non-negative integer (got " +
                             v.describe() + ")");
    }
    value = static_cast<std::uint64_t>(d);
  } else {
    return invalidArgument(std::string("'") + name + "' must be an integer");
  }
  if (value > max) {
    return invalidArgument(std::string("'") + name + "' is too large (got " + v.describe() + ")");
  }
  return value;
}

/// An identifier given as a string or an integer.
Result<std::string> identifier(const Scalar& v, const char* name) {
  if (v.kind == Scalar::Kind::String) return v.s;
  if (v.kind == Scalar::Kind::Int || v.kind == Scalar::Kind::Uint) return v.describe();
  return invalidArgument(std::string("'") + name + "' must be a string");
}

/// A list of identifiers (wait_for, branches): absent/null ⇒ empty; each at most once.
Result<std::vector<std::string>> idList(const Row& row, Field field) {
  const Row::IdList& list = row.ids(field);
  const char* name = kFieldNames[field];
  switch (list.state) {
    case Row::IdList::State::Absent:
    case Row::IdList::State::Null:
      return std::vector<std::string>{};
    case Row::IdList::State::NotArray:
      return invalidArgument(std::string("'") + name + "' must be an array of request ids");
    case Row::IdList::State::Array:
      break;
  }
  if (list.bad) {
    return invalidArgument(std::string("'") + name + "' must contain request ids (got " +
                           *list.bad + ")");
  }
  std::unordered_map<std::string_view, bool> seen;
  for (const std::string& id : list.ids) {
    if (!seen.emplace(id, true).second) {
      return invalidArgument(std::string("'") + name + "' names '" + id + "' twice");
    }
  }
  return list.ids;
}

}  // namespace mocker::replay::detail
