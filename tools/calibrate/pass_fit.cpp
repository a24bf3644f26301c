#include "tools/calibrate/pass_fit.h"

#include <Eigen/Core>
#include <unsupported/Eigen/NonLinearOptimization>
#include <unsupported/Eigen/NumericalDiff>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "tools/calibrate/csv_cells.h"

namespace mocker::calibrate {
namespace {

using detail::parseNumber;
using detail::rowError;
using detail::splitCsv;

constexpr const char* kPassColumns[] = {"pass", "new_tokens", "context", "duration_ms"};

Result<std::uint64_t> parseCount(std::string_view text, double min, double max) {
  const Result<double> v = parseNumber(text);
  if (!v || *v < min || *v > max || *v != std::floor(*v)) {
    return invalidArgument("expected an integer in [" +
                           std::to_string(static_cast<long long>(min)) + ", " +
                           std::to_string(static_cast<long long>(max)) + "]");
  }
  return static_cast<std::uint64_t>(*v);
}

/// The coefficients to fit (table entries), in table order.
Result<std::vector<const engine::RooflineCoefficientInfo*>> selectCoefficients(
    const std::vector<std::string>& names) {
  std::vector<const engine::RooflineCoefficientInfo*> out;
  for (const engine::RooflineCoefficientInfo& e : engine::rooflineCoefficientTable()) {
    const bool wanted = names.empty()
                            ? e.name != "kernel_overhead_us"
                            : std::find(names.begin(), names.end(), e.name) != names.end();
    if (wanted) out.push_back(&e);
  }
  for (const std::string& n : names) {
    if (!engine::findRooflineCoefficient(n)) {
      std::string known;
      for (const engine::RooflineCoefficientInfo& e : engine::rooflineCoefficientTable()) {
        known += (known.empty() ? "" : ", ") + std::string(e.name);
      }
      return invalidArgument("unknown roofline coefficient '" + n + "' (known: " + known + ")");
    }
  }
  return out;
}

/// x ↦ lower + (upper − lower)(1 + sin x)/2 and back.
double toCoefficient(const engine::RooflineCoefficientInfo& e, double x) {
  return e.lower + (e.upper - e.lower) * (1.0 + std::sin(x)) / 2.0;
}
double toSearch(const engine::RooflineCoefficientInfo& e, double v) {
  const double t = std::clamp(2.0 * (v - e.lower) / (e.upper - e.lower) - 1.0, -1.0, 1.0);
  return std::asin(t);
}

/// Relative residuals of every pass for the coefficients encoded in x (Eigen's functor shape).
struct PassResiduals {
  using Scalar = double;
  enum { InputsAtCompileTime = Eigen::Dynamic, ValuesAtCompileTime = Eigen::Dynamic };
  using InputType = Eigen::VectorXd;
  using ValueType = Eigen::VectorXd;
  using JacobianType = Eigen::MatrixXd;

  const engine::RooflineConfig* base = nullptr;
  const std::vector<MeasuredPass>* passes = nullptr;
  std::uint32_t cuda_graph_max_tokens = 0;
  std::vector<const engine::RooflineCoefficientInfo*> fitted;
  mutable int calls = 0;

  int inputs() const { return static_cast<int>(fitted.size()); }
  int values() const { return static_cast<int>(passes->size()); }

  engine::RooflineConfig at(const Eigen::VectorXd& x) const {
    engine::RooflineConfig c = *base;
    for (std::size_t j = 0; j < fitted.size(); ++j) {
      c.coefficients.*(fitted[j]->member) =
          toCoefficient(*fitted[j], x[static_cast<Eigen::Index>(j)]);
    }
    return c;
  }
  int operator()(const Eigen::VectorXd& x, Eigen::VectorXd& f) const {
    ++calls;
    const engine::RooflineConfig c = at(x);
    for (std::size_t i = 0; i < passes->size(); ++i) {
      const MeasuredPass& p = (*passes)[i];
      f[static_cast<Eigen::Index>(i)] =
          engine::rooflinePass(c, p.sequences, cuda_graph_max_tokens).total_ms / p.duration_ms -
          1.0;
    }
    return 0;
  }
};

/// True when moving the coefficient to either bound changes some pass's modelled time.
bool constrains(const engine::RooflineConfig& base, const std::vector<MeasuredPass>& passes,
                std::uint32_t cuda_graph_max_tokens, const engine::RooflineCoefficientInfo& e) {
  for (const double bound : {e.lower, e.upper}) {
    engine::RooflineConfig other = base;
    other.coefficients.*(e.member) = bound;
    for (const MeasuredPass& p : passes) {
      const double a = engine::rooflinePass(base, p.sequences, cuda_graph_max_tokens).total_ms;
      const double b = engine::rooflinePass(other, p.sequences, cuda_graph_max_tokens).total_ms;
      if (std::abs(a - b) > 1e-9 * std::max(a, b)) return true;
    }
  }
  return false;
}

std::string lmStatus(int status) {
  using S = Eigen::LevenbergMarquardtSpace::Status;
  switch (static_cast<S>(status)) {
    case S::RelativeReductionTooSmall:
      return "relative reduction of the residuals below ftol";
    case S::RelativeErrorTooSmall:
      return "relative step below xtol";
    case S::RelativeErrorAndReductionTooSmall:
      return "relative step below xtol and reduction below ftol";
    case S::CosinusTooSmall:
      return "residuals orthogonal to the Jacobian (gtol)";
    case S::TooManyFunctionEvaluation:
      return "maximum evaluations reached";
    case S::FtolTooSmall:
    case S::XtolTooSmall:
    case S::GtolTooSmall:
      return "tolerance too small for further progress";
    default:
      return "stopped (status " + std::to_string(status) + ")";
  }
}

}  // namespace

Result<std::vector<MeasuredPass>> parsePassesCsv(std::string_view text, std::string_view source) {
  std::vector<MeasuredPass> out;
  std::optional<std::uint64_t> current;
  std::map<std::uint64_t, std::size_t> seen;  // pass id -> line of its first row
  const auto row = [&](const std::vector<std::string_view>& cells, const detail::CsvColumns& column,
                       std::size_t line_no) -> Status {
    const auto cell = [&](const char* name) { return cells[column.at(name)]; };
    const Result<std::uint64_t> id = parseCount(cell("pass"), 0, 9e15);
    if (!id) return rowError(source, line_no, "pass", id.error().message);
    const Result<std::uint64_t> n = parseCount(cell("new_tokens"), 1, 4e9);
    if (!n) return rowError(source, line_no, "new_tokens", n.error().message);
    const Result<std::uint64_t> ctx = parseCount(cell("context"), 0, 9e15);
    if (!ctx) return rowError(source, line_no, "context", ctx.error().message);
    const Result<double> d = parseNumber(cell("duration_ms"));
    if (!d || !(*d > 0.0)) {
      return rowError(source, line_no, "duration_ms",
                      d ? "expected a duration > 0 ms" : d.error().message);
    }
    if (current != *id) {
      if (const auto it = seen.find(*id); it != seen.end()) {
        return rowError(source, line_no, "pass",
                        "pass " + std::to_string(*id) + " began at line " +
                            std::to_string(it->second) +
                            ": the rows of a pass must be consecutive");
      }
      seen.emplace(*id, line_no);
      current = *id;
      out.push_back({.duration_ms = *d, .line = line_no});
    } else if (*d != out.back().duration_ms) {
      return rowError(
          source, line_no, "duration_ms",
          "differs from the pass's first row (line " + std::to_string(out.back().line) + ")");
    }
    out.back().sequences.push_back({.new_tokens = static_cast<std::uint32_t>(*n), .context = *ctx});
    return {};
  };
  if (Status s = detail::forEachCsvRow(text, source, kPassColumns, row); !s) return s.error();
  if (out.empty()) return invalidArgument(std::string(source) + ": no passes");
  return out;
}

std::string formatPassesCsv(const std::vector<MeasuredPass>& passes) {
  std::string out = "pass,new_tokens,context,duration_ms\n";
  char buf[128];
  for (std::size_t i = 0; i < passes.size(); ++i) {
    for (const engine::PassSequence& s : passes[i].sequences) {
      std::snprintf(buf, sizeof buf, "%zu,%u,%llu,%.17g\n", i, s.new_tokens,
                    static_cast<unsigned long long>(s.context), passes[i].duration_ms);
      out += buf;
    }
  }
  return out;
}

PassFitSummary scorePasses(const engine::RooflineConfig& config,
                           const std::vector<MeasuredPass>& passes,
                           std::uint32_t cuda_graph_max_tokens) {
  std::vector<double> errors;
  errors.reserve(passes.size());
  PassFitSummary s;
  for (const MeasuredPass& p : passes) {
    const double e =
        std::abs(engine::rooflinePass(config, p.sequences, cuda_graph_max_tokens).total_ms /
                     p.duration_ms -
                 1.0) *
        100.0;
    errors.push_back(e);
    s.mean_abs_error_pct += e / static_cast<double>(passes.size());
    s.max_abs_error_pct = std::max(s.max_abs_error_pct, e);
  }
  if (errors.empty()) return s;
  std::sort(errors.begin(), errors.end());
  const std::size_t m = errors.size() / 2;
  s.median_abs_error_pct = errors.size() % 2 == 1 ? errors[m] : (errors[m - 1] + errors[m]) / 2.0;
  return s;
}

Result<PassFitResult> fitPasses(const engine::RooflineConfig& deployment,
                                const std::vector<MeasuredPass>& passes,
                                const std::vector<std::string>& names,
                                std::uint32_t cuda_graph_max_tokens) {
  if (auto problem = engine::checkRooflineConfig(deployment)) return invalidArgument(*problem);
  Result<std::vector<const engine::RooflineCoefficientInfo*>> wanted = selectCoefficients(names);
  if (!wanted) return wanted.error();
  PassFitResult result{.coefficients = deployment.coefficients};
  PassResiduals functor{
      .base = &deployment, .passes = &passes, .cuda_graph_max_tokens = cuda_graph_max_tokens};
  for (const engine::RooflineCoefficientInfo* e : *wanted) {
    if (constrains(deployment, passes, cuda_graph_max_tokens, *e)) {
      functor.fitted.push_back(e);
      result.fitted.emplace_back(e->name);
    } else {
      result.unconstrained.emplace_back(e->name);
    }
  }
  if (passes.size() < functor.fitted.size() || functor.fitted.empty()) {
    return invalidArgument(std::to_string(passes.size()) + " passes cannot fit " +
                           std::to_string(functor.fitted.size()) +
                           " coefficients (at least as many passes as coefficients, and one)");
  }
  result.before = scorePasses(deployment, passes, cuda_graph_max_tokens);
  Eigen::VectorXd x(static_cast<Eigen::Index>(functor.fitted.size()));
  for (std::size_t j = 0; j < functor.fitted.size(); ++j) {
    const engine::RooflineCoefficientInfo& e = *functor.fitted[j];
    x[static_cast<Eigen::Index>(j)] = toSearch(e, deployment.coefficients.*(e.member));
  }
  Eigen::NumericalDiff<PassResiduals> diff(functor);
  Eigen::LevenbergMarquardt<Eigen::NumericalDiff<PassResiduals>, double> lm(diff);
  lm.parameters.maxfev = 400 * static_cast<int>(functor.fitted.size() + 1);
  lm.parameters.xtol = 1e-10;
  lm.parameters.ftol = 1e-12;
  const int status = lm.minimize(x);
  const engine::RooflineConfig fitted = diff.at(x);
  result.coefficients = fitted.coefficients;
  result.after = scorePasses(fitted, passes, cuda_graph_max_tokens);
  result.evaluations = diff.calls;
  result.stop_reason = lmStatus(status);
  return result;
}

}  // namespace mocker::calibrate
