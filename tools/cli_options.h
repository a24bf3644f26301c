// The option framework shared by every `mocker` command: the help formatter (each option's type
// and default, boolean pairs without CLI11's "{false}" marker), range validators worded for
// people, and the text of a parse error (unknown options get "did you mean …?").
//
//   CLI::App app{...};
//   app.formatter(std::make_shared<HelpFormatter>());   // before adding subcommands: they copy it
//   opt->check(atLeast(1));                            // "--num-workers: must be >= 1 (got 0)"
//   catch (const CLI::ParseError& e) { err << parseErrorMessage(app, e); return 2; }
//
// Defaults in --help come from an option's default string (CLI11 capture_default_str() or
// default_str()); a boolean flag states its default in its description (flagDefault()).
// Call from the main thread.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace mocker::tools {

/// CLI11's formatter with: the type of every value option ("UINT", "FLOAT:> 0", "NAME", an
/// option_text such as "FILE"; helpMetavar), what it excludes or needs and its default at the
/// end of its description ("(not with --num-prompts)", "(default: 512)"),
/// and a boolean pair shown as "--x,--no-x" (CLI11 appends "{false}", which reads as a default).
class HelpFormatter final : public CLI::Formatter {
 public:
  HelpFormatter();
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
  std::string make_option_desc(const CLI::Option* opt) const override;
};

/// The value's name in --help: the type CLI11 gives, with one word per kind of value — NAME for
/// one of a fixed set ("NAME:{offline,live}"), EP for an endpoint ("--*-endpoint",
/// "--*-advertise", "--connect*"), FILE for a path ("--*-file", "--*-json", "--*-jsonl",
/// "--*-html", "--*-profile", "--*-path"), TEXT for any other string.
std::string helpMetavar(const CLI::Option& opt);

/// "  (default: on)" / "  (default: off)": the default of a boolean flag, for its description.
std::string flagDefault(bool on);

/// Numeric validators; a failure reads "--flag: must be >= 1 (got 0)", and --help shows the
/// range after the type ("UINT:>= 1").
CLI::Validator atLeast(double min);
CLI::Validator greaterThan(double min);
CLI::Validator between(double min, double max);

/// The message for a parse error of `app` (help and version requests are not errors): the
/// command ("mocker replay: "), what is wrong, for an unknown option the nearest known option of
/// that command ("did you mean '--num-gpu-blocks'?"), and where to find the options. Ends with
/// a newline.
std::string parseErrorMessage(const CLI::App& app, const CLI::ParseError& error);

}  // namespace mocker::tools
