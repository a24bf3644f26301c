#include "tools/cli_options.h"

#include <charconv>
#include <cmath>
#include <string_view>
#include <vector>

#include "base/closest_name.h"

namespace mocker::tools {
namespace {

/// A bound as people write it: "1", "0.5", "60000".
std::string formatBound(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, end) : std::to_string(v);
}

CLI::Validator rangeValidator(double min, double max, bool min_inclusive, std::string desc) {
  std::string wording = "must be " + desc;
  return CLI::Validator(
      [min, max, min_inclusive, wording](std::string& text) -> std::string {
        double v = 0.0;
        const char* first = text.data();
        const char* last = text.data() + text.size();
        const auto [end, ec] = std::from_chars(first, last, v);
        if (text.empty() || ec != std::errc{} || end != last || !std::isfinite(v)) {
          return "expected a finite number, got '" + text + "'";
        }
        const bool low_ok = min_inclusive ? v >= min : v > min;
        if (!low_ok || v > max) return wording + " (got " + text + ")";
        return std::string();
      },
      desc, "RANGE");
}

/// The deepest subcommand the parse selected (`app` itself if none).
const CLI::App* selectedCommand(const CLI::App& app) {
  const CLI::App* cmd = &app;
  for (;;) {
    const auto subs = cmd->get_subcommands();
    if (subs.empty()) return cmd;
    cmd = subs.front();
  }
}

std::string commandPath(const CLI::App& app, const CLI::App* cmd) {
  std::string path;
  for (const CLI::App* a = cmd; a != nullptr && a != &app; a = a->get_parent()) {
    path = " " + a->get_name() + path;
  }
  return app.get_name() + path;
}

/// The options --help shows for `cmd`, as typed ("--num-gpu-blocks", "-h").
std::vector<std::string> visibleOptionNames(const CLI::App* cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : cmd->get_options()) {
    if (opt->get_group().empty() || opt->get_positional()) continue;
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

}  // namespace

HelpFormatter::HelpFormatter() { column_width(32); }

std::string HelpFormatter::make_option_name(const CLI::Option* opt, bool is_positional) const {
  std::string name = CLI::Formatter::make_option_name(opt, is_positional);
  // "--x,--no-x{false}": the braces hold the value the negation stores, not the default.
  for (std::size_t open = name.find('{'); open != std::string::npos; open = name.find('{')) {
    const std::size_t close = name.find('}', open);
    if (close == std::string::npos) break;
    name.erase(open, close - open + 1);
  }
  return name;
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  if (!opt->get_option_text().empty()) return " " + helpMetavar(*opt);
  std::string out;
  if (opt->get_type_size() != 0) {
    if (!opt->get_type_name().empty()) out += " " + helpMetavar(*opt);
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
    if (opt->get_required()) out += " REQUIRED";
  }
  return out;  // what it excludes or needs: in the description, not on the name line
}

std::string HelpFormatter::make_option_desc(const CLI::Option* opt) const {
  std::string desc = opt->get_description();
  for (const CLI::Option* other : opt->get_excludes()) {
    desc += "  (not with " + other->get_name() + ")";
  }
  for (const CLI::Option* other : opt->get_needs()) desc += "  (needs " + other->get_name() + ")";
  if (opt->get_type_size() != 0 && !opt->get_default_str().empty()) {
    desc += "  (default: " + opt->get_default_str() + ")";
  }
  return desc;
}

std::string helpMetavar(const CLI::Option& opt) {
  const std::string type =
      opt.get_option_text().empty() ? opt.get_type_name() : opt.get_option_text();
  // One of a fixed set of names: NAME, as the config-key flags spell theirs.
  if (type.starts_with("TEXT:{")) return "NAME" + type.substr(4);
  if (type != "TEXT" || opt.get_lnames().empty()) return type;
  const std::string& name = opt.get_lnames().front();
  const auto ends = [&name](std::string_view tail) { return name.ends_with(tail); };
  if (ends("endpoint") || ends("advertise") || name.starts_with("connect")) return "EP";
  for (std::string_view tail : {"-file", "-json", "-jsonl", "-html", "-profile", "-path"}) {
    if (ends(tail)) return "FILE";
  }
  return type;
}

std::string flagDefault(bool on) { return on ? "  (default: on)" : "  (default: off)"; }

CLI::Validator atLeast(double min) {
  return rangeValidator(min, HUGE_VAL, true, ">= " + formatBound(min));
}

CLI::Validator greaterThan(double min) {
  return rangeValidator(min, HUGE_VAL, false, "> " + formatBound(min));
}

CLI::Validator between(double min, double max) {
  return rangeValidator(min, max, true, "in " + formatBound(min) + ".." + formatBound(max));
}

std::string parseErrorMessage(const CLI::App& app, const CLI::ParseError& error) {
  const CLI::App* cmd = selectedCommand(app);
  const std::string path = commandPath(app, cmd);
  std::string what = error.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    const std::vector<std::string> extras = app.remaining(true);
    std::string first_option;
    for (const std::string& arg : extras) {
      if (arg.size() > 1 && arg[0] == '-') {
        first_option = arg.substr(0, arg.find('='));
        break;
      }
    }
    if (!first_option.empty()) {
      what = "unknown option '" + first_option + "'" +
             didYouMean(first_option, visibleOptionNames(cmd));
    } else if (!extras.empty() && cmd == &app) {
      std::vector<std::string> commands;
      for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        commands.push_back(sub->get_name());
      what = "unknown command '" + extras.front() + "'" + didYouMean(extras.front(), commands);
    } else if (!extras.empty()) {
      what = "unexpected argument '" + extras.front() + "'";
    }
  }
  return path + ": " + what + "\nRun `" + path + " --help` for the options.\n";
}

}  // namespace mocker::tools
