// The study report: CSV, Markdown, JSON and SVG text; see report.h.
#include "tools/eval/sim/study/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/eval/workload/json_line.h"

namespace cacheroute::sim::study {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Loads as text: "30", "2.5".
std::string LoadText(double load) { return absl::StrFormat("%g", load); }

// A number for JSON: null when not finite.
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double MeanOfFinite(const std::vector<double>& v) {
  double sum = 0;
  int n = 0;
  for (double x : v) {
    if (std::isfinite(x)) {
      sum += x;
      ++n;
    }
  }
  return n == 0 ? kNaN : sum / n;
}

MeanCi MeanCiOfFinite(const std::vector<double>& v) {
  std::vector<double> finite;
  for (double x : v) {
    if (std::isfinite(x)) finite.push_back(x);
  }
  return MeanWithCi(finite);
}

std::vector<double> LoadsRun(const StudyResult& result) {
  std::set<double> loads;
  for (const RunRecord& r : result.runs) loads.insert(r.offered_qps);
  return {loads.begin(), loads.end()};
}

// The summaries behind `gateways` gateways, in the study's policy order.
std::vector<PolicySummary> AtGateways(const std::vector<PolicySummary>& summary,
                                      uint32_t gateways) {
  std::vector<PolicySummary> out;
  for (const PolicySummary& s : summary) {
    if (s.gateways == gateways) out.push_back(s);
  }
  return out;
}

// The plots show one gateway count, the smallest run: a plot per count would repeat the policies.
uint32_t PlottedGateways(const StudyResult& result) { return GatewaysRun(result).front(); }

std::string Percent(const MeanCi& m) {
  if (!std::isfinite(m.mean)) return "–";
  if (!m.has_interval) return absl::StrFormat("%.1f%%", 100 * m.mean);
  return absl::StrFormat("%.1f±%.1f%%", 100 * m.mean, 100 * m.half_width);
}

std::string Seconds(double s) {
  if (!std::isfinite(s)) return "–";
  return absl::StrFormat("%.2fs", s);
}

std::string Ratio(const MeanCi& m) {
  if (!std::isfinite(m.mean)) return "–";
  if (!m.has_interval) return absl::StrFormat("%.2f×", m.mean);
  return absl::StrFormat("%.2f±%.2f×", m.mean, m.half_width);
}

// A palette that stays distinguishable for the six policies (Okabe–Ito, colour-blind safe).
constexpr const char* kColors[] = {"#E69F00", "#56B4E9", "#009E73", "#CC79A7",
                                   "#0072B2", "#D55E00", "#999999", "#000000"};
const char* Color(size_t i) { return kColors[i % (sizeof(kColors) / sizeof(kColors[0]))]; }

// The frame shared by the three plots.
struct Frame {
  double width = 760, height = 440;
  double left = 72, right = 170, top = 44, bottom = 64;
  double plot_w() const { return width - left - right; }
  double plot_h() const { return height - top - bottom; }
};

std::string SvgOpen(const Frame& f, std::string_view title) {
  return absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
      "viewBox=\"0 0 %g %g\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"%g\" height=\"%g\" fill=\"white\"/>\n"
      "<text x=\"%g\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">%s</text>\n",
      f.width, f.height, f.width, f.height, f.width, f.height, f.left + f.plot_w() / 2,
      XmlEscape(title));
}

std::string Axes(const Frame& f, std::string_view x_label, std::string_view y_label) {
  std::string out = absl::StrFormat(
      "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n",
      f.left, f.top, f.plot_w(), f.plot_h());
  absl::StrAppendFormat(&out, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>\n",
                        f.left + f.plot_w() / 2, f.height - 18, XmlEscape(x_label));
  absl::StrAppendFormat(&out,
                        "<text x=\"18\" y=\"%g\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 18 %g)\">%s</text>\n",
                        f.top + f.plot_h() / 2, f.top + f.plot_h() / 2, XmlEscape(y_label));
  return out;
}

std::string YTick(const Frame& f, double y, std::string_view label) {
  return absl::StrFormat(
      "<line x1=\"%g\" y1=\"%.2f\" x2=\"%g\" y2=\"%.2f\" stroke=\"#dddddd\"/>\n"
      "<line x1=\"%g\" y1=\"%.2f\" x2=\"%g\" y2=\"%.2f\" stroke=\"black\"/>\n"
      "<text x=\"%g\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n",
      f.left, y, f.left + f.plot_w(), y, f.left - 5, y, f.left, y, f.left - 8, y + 4,
      XmlEscape(label));
}

std::string Legend(const Frame& f, const std::vector<std::string>& names, bool markers) {
  std::string out;
  const double x = f.left + f.plot_w() + 16;
  for (size_t i = 0; i < names.size(); ++i) {
    const double y = f.top + 12 + 20.0 * i;
    if (markers) {
      absl::StrAppendFormat(&out,
                            "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" "
                            "stroke-width=\"2\"/>\n<circle cx=\"%g\" cy=\"%g\" r=\"3.5\" "
                            "fill=\"%s\"/>\n",
                            x, y, x + 24, y, Color(i), x + 12, y, Color(i));
    } else {
      absl::StrAppendFormat(&out,
                            "<rect x=\"%g\" y=\"%g\" width=\"16\" height=\"10\" fill=\"%s\"/>\n",
                            x + 4, y - 5, Color(i));
    }
    absl::StrAppendFormat(&out, "<text x=\"%g\" y=\"%g\">%s</text>\n", x + 30, y + 4,
                          XmlEscape(names[i]));
  }
  return out;
}

// Vertical bars with 95% error bars, one per policy; `label` is written above each bar.
std::string BarChart(const StudyResult& study, std::string_view title, std::string_view y_label,
                     const std::vector<MeanCi>& values, const std::vector<std::string>& labels,
                     double scale, double y_floor_max) {
  Frame f;
  f.width = 600;
  f.right = 24;  // no legend: the policies label the bars
  std::string out = SvgOpen(f, title);
  double y_max = y_floor_max;
  for (const MeanCi& v : values) {
    if (std::isfinite(v.mean)) y_max = std::max(y_max, scale * (v.mean + v.half_width));
  }
  // A round upper limit: 1, 2 or 5 times a power of ten, with five or so ticks.
  const double raw_step = std::max(y_max, 1e-9) / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw_step)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw_step) break;
  }
  y_max = step * std::ceil(y_max / step - 1e-9);
  if (y_max <= 0) y_max = 1;
  auto Y = [&](double v) { return f.top + f.plot_h() * (1 - v / y_max); };
  for (double v = 0; v <= y_max * 1.0001; v += step)
    out += YTick(f, Y(v), absl::StrFormat("%g", v));
  out += Axes(f, "policy", y_label);
  const size_t n = values.size();
  const double slot = f.plot_w() / std::max<size_t>(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const double cx = f.left + slot * (i + 0.5);
    const std::string& name = study.config.policies[i];
    absl::StrAppendFormat(&out, "<text x=\"%.2f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", cx,
                          f.top + f.plot_h() + 18, XmlEscape(name));
    if (!std::isfinite(values[i].mean)) continue;
    const double mean = scale * values[i].mean;
    const double bar_w = slot * 0.6;
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
                          "<title>%s: %s</title></rect>\n",
                          cx - bar_w / 2, Y(mean), bar_w, std::max(0.0, Y(0) - Y(mean)), Color(i),
                          XmlEscape(name), XmlEscape(labels[i]));
    double label_y = Y(mean) - 6;
    if (values[i].has_interval && values[i].half_width > 0) {
      const double lo = std::max(0.0, mean - scale * values[i].half_width);
      const double hi = mean + scale * values[i].half_width;
      absl::StrAppendFormat(&out,
                            "<path d=\"M %.2f %.2f V %.2f M %.2f %.2f H %.2f M %.2f %.2f H %.2f\" "
                            "stroke=\"black\" stroke-width=\"1.5\" fill=\"none\"/>\n",
                            cx, Y(lo), Y(hi), cx - 8, Y(lo), cx + 8, cx - 8, Y(hi), cx + 8);
      label_y = Y(hi) - 6;
    }
    absl::StrAppendFormat(&out, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n",
                          cx, label_y, XmlEscape(labels[i]));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace

double CommonLoad(const StudyResult& result) {
  const std::vector<double> loads = LoadsRun(result);
  if (loads.empty()) return kNaN;
  if (result.config.common_load_qps <= 0) return loads.back();
  double best = loads.front();
  for (double l : loads) {
    if (std::abs(l - result.config.common_load_qps) <
        std::abs(best - result.config.common_load_qps)) {
      best = l;
    }
  }
  return best;
}

std::vector<uint32_t> GatewaysRun(const StudyResult& result) {
  std::set<uint32_t> counts;
  for (const RunRecord& r : result.runs) counts.insert(r.gateways);
  if (counts.empty()) counts.insert(result.config.gateway_counts.front());
  return {counts.begin(), counts.end()};
}

namespace {

// One policy behind `gateways` gateways, over the study's seeds.
PolicySummary SummarizeRuns(const StudyResult& result, const std::string& policy,
                            uint32_t gateways) {
  const double common = CommonLoad(result);
  PolicySummary s;
  s.policy = policy;
  s.gateways = gateways;
  s.common_load_qps = common;
  // One sweep per seed, in the study's seed order.
  std::vector<std::vector<LoadPoint>> sweeps;
  std::vector<double> hits, precisions, imbalances, p99s;
  std::map<double, std::vector<double>> p99_by_load, hit_by_load, failure_by_load;
  for (uint64_t seed : result.config.seeds) {
    std::vector<LoadPoint> sweep;
    for (const RunRecord& r : result.runs) {
      if (r.policy != policy || r.gateways != gateways || r.seed != seed) continue;
      // With no completed request there is no latency to report (the fleet gives 0).
      const double p99 = r.completed > 0 ? r.ttft_p99_s : kNaN;
      // A request shed (429) is not served: for capacity it counts as failed, so that shedding
      // cannot pass a load by turning most of it away.
      const double unserved =
          r.requests > 0 ? static_cast<double>(r.failed + r.shed) / r.requests : r.failure_rate;
      sweep.push_back({r.offered_qps, p99, unserved});
      p99_by_load[r.offered_qps].push_back(p99);
      hit_by_load[r.offered_qps].push_back(r.kv_hit);
      failure_by_load[r.offered_qps].push_back(unserved);
      if (r.offered_qps == common) {
        hits.push_back(r.kv_hit);
        precisions.push_back(r.routing_precision);
        imbalances.push_back(r.imbalance);
        p99s.push_back(p99);
      }
    }
    if (!sweep.empty()) sweeps.push_back(std::move(sweep));
  }
  s.capacity_2s = ComputeCapacity(sweeps, 2.0);
  s.capacity_primary = ComputeCapacity(sweeps, result.config.primary_slo_s);
  s.capacity_5s = ComputeCapacity(sweeps, 5.0);
  s.kv_hit = MeanCiOfFinite(hits);
  s.routing_precision = MeanCiOfFinite(precisions);
  s.imbalance = MeanCiOfFinite(imbalances);
  s.p99_at_common_s = MeanCiOfFinite(p99s);
  for (const auto& [load, v] : p99_by_load) s.p99_ttft_s[load] = MeanOfFinite(v);
  for (const auto& [load, v] : hit_by_load) s.kv_hit_by_load[load] = MeanOfFinite(v);
  for (const auto& [load, v] : failure_by_load) s.failure_rate[load] = MeanOfFinite(v);
  // The ceiling at the hit the policy had where its capacity is.
  s.ceiling_hit = s.ceiling_qps = s.ceiling_fraction = kNaN;
  if (!s.kv_hit_by_load.empty()) {
    const double capacity = s.capacity_primary.knee.mean;
    double nearest = s.kv_hit_by_load.begin()->first;
    for (const auto& [load, hit] : s.kv_hit_by_load) {
      if (std::abs(load - capacity) < std::abs(nearest - capacity)) nearest = load;
    }
    s.ceiling_hit = s.kv_hit_by_load[nearest];
    absl::StatusOr<double> ceiling = CeilingQps(result.config, result.ceiling, s.ceiling_hit);
    if (ceiling.ok() && std::isfinite(s.ceiling_hit)) {
      s.ceiling_qps = *ceiling;
      s.ceiling_fraction = capacity / *ceiling;
    }
  }
  return s;
}

}  // namespace

std::vector<PolicySummary> Summarize(const StudyResult& result) {
  std::vector<PolicySummary> out;
  for (const std::string& policy : result.config.policies) {
    for (const uint32_t gateways : GatewaysRun(result)) {
      out.push_back(SummarizeRuns(result, policy, gateways));
    }
  }
  return out;
}

std::string FormatCapacity(const Capacity& c, double lowest_load, double highest_load) {
  const int n = c.knee.n;
  if (n == 0) return "–";
  if (c.left_censored == n) return "<" + LoadText(lowest_load);
  if (c.right_censored == n) return "≥" + LoadText(highest_load);
  // Whole QPS on the paper's ladders; a tenth below 10 QPS (the trace study's 5.5, or 4.3 as a
  // mean of 4, 4 and 5), where whole numbers would hide the differences.
  const int digits = lowest_load < 10 ? 1 : 0;
  std::string out = c.knee.has_interval ? absl::StrFormat("%.*f±%.*f", digits, c.knee.mean, digits,
                                                          c.knee.half_width)
                                        : absl::StrFormat("%.*f", digits, c.knee.mean);
  if (c.left_censored > 0) out += "*";
  if (c.right_censored > 0) out += "+";
  return out;
}

std::string RunsCsv(std::span<const StudyResult> studies) {
  std::string out =
      "study,policy,gateways,offered_qps,seed,ttft_p50_s,ttft_p90_s,ttft_p99_s,e2e_p50_s,e2e_p99_"
      "s,kv_hit,routing_precision,imbalance,requests,completed,failed,failure_rate,throughput_rps,"
      "plans,plan_churn,simulated_s,wall_s\n";
  for (const StudyResult& study : studies) {
    for (const RunRecord& r : study.runs) {
      absl::StrAppendFormat(&out,
                            "%s,%s,%d,%g,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%d,%d,%d,%.6g,"
                            "%.6g,%d,%.6g,%.6g,%.3f\n",
                            r.study, r.policy, r.gateways, r.offered_qps, r.seed, r.ttft_p50_s,
                            r.ttft_p90_s, r.ttft_p99_s, r.e2e_p50_s, r.e2e_p99_s, r.kv_hit,
                            r.routing_precision, r.imbalance, r.requests, r.completed, r.failed,
                            r.failure_rate, r.throughput_rps, r.plans, r.plan_churn, r.simulated_s,
                            r.wall_s);
    }
  }
  return out;
}

std::string ReportMarkdown(std::span<const StudyResult> studies) {
  std::string out = "# cacheroute-sim report\n\n";
  out +=
      "Capacity is the largest offered load (QPS) whose p99 TTFT meets the SLO with at most 5% "
      "failures (a request shed with 429 counts as one), per seed, then mean ± 95% Student-t over seeds (paper Appendix B.2). `<30`: every "
      "seed failed at the lowest load (left-censored); `≥300`: every seed passed the highest load "
      "(right-censored); `*`: some seeds left-censored, counted as 0; `+`: some seeds "
      "right-censored. KV hit is served and token-weighted. Precision is routing precision: of the "
      "requests some engine's cache held a prefix of when they were dispatched, the share sent to "
      "an engine holding the longest (ties count; requests no engine held any prefix of are left "
      "out). KV hit, precision, imbalance (max/mean prefill work per destination) and p99 are "
      "means over seeds at the common load. G is the number of gateways, each routing with only "
      "its own view (requests are dealt to them in turn).\n";
  for (const StudyResult& study : studies) {
    const StudyConfig& c = study.config;
    const std::vector<double> loads = LoadsRun(study);
    const double lo = loads.empty() ? 0 : loads.front();
    const double hi = loads.empty() ? 0 : loads.back();
    const std::vector<PolicySummary> summary = Summarize(study);
    const std::vector<uint32_t> gateway_counts = GatewaysRun(study);
    const uint32_t plotted = PlottedGateways(study);
    const std::string common = LoadText(CommonLoad(study));
    absl::StrAppendFormat(&out, "\n## Study `%s`\n\n%s\n\n", c.name, c.description);
    // A trace-driven study's window is what remains of the rescaled trace (study.h).
    const std::string requests =
        c.trace.enabled
            ? absl::StrFormat("trace `%s` rescaled to each load, key = first %d hash ids",
                              std::filesystem::path(c.trace.path).filename().string(),
                              c.trace.key_blocks)
            : absl::StrFormat("top-K %d", c.workload.top_k);
    const std::string window =
        c.trace.enabled ? absl::StrFormat("the rest of the trace (at most %g s)", c.duration_s)
                        : absl::StrFormat("%g simulated seconds", c.duration_s);
    absl::StrAppendFormat(
        &out,
        "Profile `%s`, R = %d destinations, G = {%s} gateways, %s%s, seeds {%s}, %s per run after "
        "%g s of warm-up, loads {%s} QPS; %d runs, %d simulated requests, %.1f s wall.\n\n",
        c.profile, c.destinations, absl::StrJoin(gateway_counts, ","), requests,
        c.whales.count > 0 ? absl::StrFormat(" + %d whales carrying %.0f%% of the load",
                                             c.whales.count, 100 * c.whales.share)
                           : "",
        absl::StrJoin(c.seeds, ","), window, c.fleet.warmup_s,
        absl::StrJoin(loads, ",", [](std::string* o, double l) { o->append(LoadText(l)); }),
        study.runs.size(), study.simulated_requests, study.wall_s);
    absl::StrAppendFormat(
        &out,
        "| Policy | G | KV hit | Precision | Cap.@%gs | Cap.@2s | Cap.@5s | "
        "p99@%s | Imbalance@%s |\n| --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- |\n",
        c.primary_slo_s, common, common);
    for (const PolicySummary& s : summary) {
      absl::StrAppendFormat(&out, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", s.policy,
                            s.gateways, Percent(s.kv_hit), Percent(s.routing_precision),
                            FormatCapacity(s.capacity_primary, lo, hi),
                            FormatCapacity(s.capacity_2s, lo, hi),
                            FormatCapacity(s.capacity_5s, lo, hi), Seconds(s.p99_at_common_s.mean),
                            Ratio(s.imbalance));
    }
    // p99 per load.
    absl::StrAppendFormat(
        &out, "\np99 TTFT (s, mean over seeds) by offered load (QPS):\n\n| Policy | G |");
    for (double l : loads) absl::StrAppendFormat(&out, " %s |", LoadText(l));
    out += "\n| --- | --- |";
    for (size_t i = 0; i < loads.size(); ++i) out += " --- |";
    out += "\n";
    for (const PolicySummary& s : summary) {
      absl::StrAppendFormat(&out, "| %s | %d |", s.policy, s.gateways);
      for (double l : loads) {
        auto it = s.p99_ttft_s.find(l);
        const double v = it == s.p99_ttft_s.end() ? kNaN : it->second;
        auto f = s.failure_rate.find(l);
        const bool failing = f != s.failure_rate.end() && f->second > kMaxFailureRate;
        absl::StrAppendFormat(&out, " %s%s |", std::isfinite(v) ? absl::StrFormat("%.2f", v) : "–",
                              failing ? "ᶠ" : "");
      }
      out += "\n";
    }
    out += "\nᶠ: more than 5% of requests failed (timeout or queue cap) at that load.\n";
    if (study.ceiling.measured) {
      absl::StatusOr<double> reuse_ceiling = CeilingQps(c, study.ceiling, study.ceiling.reuse);
      absl::StrAppendFormat(
          &out,
          "\nAnalytic ceilings (`cacheroute-sim bound`): R × one destination's saturation rate at "
          "the workload's mean lengths (prompt %.0f, output %.0f tokens) and the policy's own KV "
          "hit where its capacity is; no router sustains its ceiling within an SLO. The reuse "
          "ceiling, one engine with an unbounded cache, is %.1f%% hit: %s QPS.\n\n"
          "| Policy | G | KV hit at capacity | Ceiling (QPS) | Capacity / ceiling |\n"
          "| --- | --- | --- | --- | --- |\n",
          study.ceiling.mean_prompt_tokens, study.ceiling.mean_output_tokens,
          100 * study.ceiling.reuse,
          reuse_ceiling.ok() ? LoadText(std::round(*reuse_ceiling * 10) / 10) : "–");
      for (const PolicySummary& s : summary) {
        const bool censored_high =
            s.capacity_primary.knee.n > 0 && s.capacity_primary.right_censored > 0;
        absl::StrAppendFormat(
            &out, "| %s | %d | %s | %s | %s |\n", s.policy, s.gateways,
            std::isfinite(s.ceiling_hit) ? absl::StrFormat("%.1f%%", 100 * s.ceiling_hit) : "–",
            std::isfinite(s.ceiling_qps) ? LoadText(std::round(s.ceiling_qps * 10) / 10) : "–",
            std::isfinite(s.ceiling_fraction)
                ? absl::StrFormat("%s%.2f", censored_high ? "≥" : "", s.ceiling_fraction)
                : "–");
      }
    }
    // CacheRoute's plans at the common load: how often it replanned and how much each replan moved.
    {
      const double at = CommonLoad(study);
      std::string rows;
      for (const PolicySummary& s : summary) {
        double plans = 0, churn = 0, hit = 0, p99 = 0;
        int n = 0;
        for (const RunRecord& r : study.runs) {
          if (r.offered_qps != at || r.plans == 0) continue;
          if (r.policy != s.policy || r.gateways != s.gateways) continue;
          plans += r.plans;
          churn += r.plan_churn;
          hit += r.kv_hit;
          p99 += r.ttft_p99_s;
          ++n;
        }
        if (n == 0) continue;
        absl::StrAppendFormat(&rows, "| %s | %d | %.1f | %s | %.1f%% | %s |\n", s.policy,
                              s.gateways, plans / n,
                              plans / n > 1.5 ? absl::StrFormat("%.1f%%", 100 * churn / n) : "–",
                              100 * hit / n, Seconds(p99 / n));
      }
      if (!rows.empty()) {
        absl::StrAppendFormat(&out,
                              "\nCacheRoute's plans at %s QPS (means over seeds; plans include the "
                              "warm-up; churn: share of keys in two consecutive plans whose "
                              "destinations changed):\n\n| Policy | G | Plans per run | Churn per "
                              "replan | KV hit | p99 |\n| --- | --- | --- | --- | --- | --- |\n%s",
                              common, rows);
      }
    }
    // The rollout gate's decisions, per gated run.
    std::string gate_rows;
    const bool turns = c.regime_change.enabled;
    for (const RunRecord& r : study.runs) {
      if (r.gate_state.empty()) continue;
      std::string enabled_at = "–", rolled_back_at = "–";
      for (const RunRecord::GateChange& change : r.gate_history) {
        const double t = change.time;
        const std::string& state = change.state;
        if (state == "enabled" && enabled_at == "–") enabled_at = absl::StrFormat("%g s", t);
        if (state == "rolled_back" && rolled_back_at == "–" &&
            (!turns || t >= c.regime_change.at_s)) {
          rolled_back_at = turns ? absl::StrFormat("%g s (+%g s)", t, t - c.regime_change.at_s)
                                 : absl::StrFormat("%g s", t);
        }
      }
      absl::StrAppendFormat(&gate_rows, "| %s | %d | %s | %d | %s | %s | %s | %s |\n", r.policy,
                            r.gateways, LoadText(r.offered_qps), r.seed, enabled_at, rolled_back_at,
                            r.gate_state, GateHistoryText(r.gate_history));
    }
    if (!gate_rows.empty()) {
      absl::StrAppendFormat(
          &out,
          "\nThe rollout gate's decisions per gated run (simulated seconds from the start, warm-up "
          "included; history: each state change as time:state)%s:\n\n| Policy | G | QPS | Seed | "
          "Enabled at | Rolled back at | Final | History |\n| --- | --- | --- | --- | --- | --- | "
          "--- | --- |\n%s",
          turns ? absl::StrFormat("; the workload turns into `%s`'s at %g s, and a rollback is "
                                  "counted from then",
                                  c.regime_change.to, c.regime_change.at_s)
                : "",
          gate_rows);
    }
    if (study.has_drift) {
      const DriftResult& d = study.drift;
      absl::StrAppendFormat(
          &out,
          "\nPlan churn under the random walk (σ = %g per interval, %d "
          "intervals, seed %d), fresh plan against the previous fresh plan:\n\n"
          "| Transition | Cache churn | Count churn | 1 − Jaccard | Expected imbalance, "
          "fresh plan | Expected imbalance, plan of interval 0 |\n"
          "| --- | --- | --- | --- | --- | --- |\n",
          d.sigma, d.intervals, d.seed);
      for (const DriftTransition& t : d.transitions) {
        absl::StrAppendFormat(&out, "| %d→%d | %.1f%% | %.1f%% | %.1f%% | %.3f× | %.3f× |\n",
                              t.from_interval, t.from_interval + 1, 100 * t.cache_churn,
                              100 * t.count_churn, 100 * t.jaccard_churn, t.fresh_imbalance,
                              t.stale_imbalance);
      }
      absl::StrAppendFormat(&out, "| mean | %.1f%% | %.1f%% | | | |\n", 100 * d.mean_cache_churn,
                            100 * d.mean_count_churn);
      out +=
          "\nCache churn: admitted keys (in both plans) whose destination set changed; count "
          "churn: whose number of destinations changed; 1 − Jaccard over (key, destination) "
          "pairs. The expected imbalance is max/mean expected load per destination under the "
          "interval's walked rates, for the plan built from them and for the plan of interval 0 "
          "kept ever since (the planner-level stale plan).\n";
      // The stale plan's loss against the fresh one, paired by seed, at the common load.
      const PolicySummary* fresh = nullptr;
      const PolicySummary* stale = nullptr;
      for (const PolicySummary& s : summary) {
        if (s.gateways != plotted) continue;
        if (s.policy == "fresh") fresh = &s;
        if (s.policy == "stale") stale = &s;
      }
      if (fresh != nullptr && stale != nullptr) {
        absl::StrAppendFormat(
            &out,
            "\nIn the fleet at %s QPS behind G = %d, `stale` (one plan per drift interval, from "
            "the "
            "previous interval's rates) against `fresh` (a plan every control interval): KV hit "
            "%.1f%% vs %.1f%% (stale − fresh = %+.1f points), p99 TTFT %s vs %s.\n",
            common, plotted, 100 * stale->kv_hit.mean, 100 * fresh->kv_hit.mean,
            100 * (stale->kv_hit.mean - fresh->kv_hit.mean), Seconds(stale->p99_at_common_s.mean),
            Seconds(fresh->p99_at_common_s.mean));
      }
    }
    absl::StrAppendFormat(&out,
                          "\nThe plots are at G = %d.\n\n"
                          "![p99 TTFT against offered load](%s-p99.svg)\n"
                          "![SLO capacity per policy](%s-capacity.svg)\n"
                          "![KV hit per policy](%s-kv-hit.svg)\n",
                          plotted, c.name, c.name, c.name);
  }
  return out;
}

namespace {

// One policy's figures behind one gateway count, as the members of a JSON object, each line
// opened by `indent`.
std::string PolicyJsonFields(const PolicySummary& s, const StudyConfig& c,
                             const std::string& indent) {
  auto by_load = [](const std::map<double, double>& m) {
    return absl::StrJoin(m, ", ", [](std::string* o, const std::pair<const double, double>& e) {
      absl::StrAppend(o, workload::JsonQuote(LoadText(e.first)), ": ", JsonNumber(e.second));
    });
  };
  auto capacity = [](const Capacity& c) {
    return absl::StrFormat(
        "{\"mean\": %s, \"ci\": %s, \"left_censored_runs\": %d, \"right_censored_runs\": %d, "
        "\"per_seed\": [%s]}",
        JsonNumber(c.knee.mean), c.knee.has_interval ? JsonNumber(c.knee.half_width) : "null",
        c.left_censored, c.right_censored,
        absl::StrJoin(c.runs, ", ", [](std::string* o, const Knee& k) {
          o->append(JsonNumber(k.capacity_qps));
        }));
  };
  auto ci = [](const MeanCi& m) { return m.has_interval ? JsonNumber(m.half_width) : "null"; };
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"gateways", absl::StrCat(s.gateways)},
      {"capacity_qps", JsonNumber(s.capacity_primary.knee.mean)},
      {"capacity_ci", ci(s.capacity_primary.knee)},
      {"capacity_left_censored_runs", absl::StrCat(s.capacity_primary.left_censored)},
      {"capacity_right_censored_runs", absl::StrCat(s.capacity_primary.right_censored)},
      {"capacity_by_slo",
       absl::StrFormat("{\"2\": %s, %s: %s, \"5\": %s}", capacity(s.capacity_2s),
                       workload::JsonQuote(absl::StrFormat("%g", c.primary_slo_s)),
                       capacity(s.capacity_primary), capacity(s.capacity_5s))},
      {"kv_hit", JsonNumber(s.kv_hit.mean)},
      {"kv_hit_ci", ci(s.kv_hit)},
      {"routing_precision", JsonNumber(s.routing_precision.mean)},
      {"routing_precision_ci", ci(s.routing_precision)},
      {"imbalance", JsonNumber(s.imbalance.mean)},
      {"imbalance_ci", ci(s.imbalance)},
      {"p99_ttft_s", absl::StrCat("{", by_load(s.p99_ttft_s), "}")},
      {"kv_hit_by_load", absl::StrCat("{", by_load(s.kv_hit_by_load), "}")},
      {"failure_rate", absl::StrCat("{", by_load(s.failure_rate), "}")},
      {"ceiling_kv_hit", JsonNumber(s.ceiling_hit)},
      {"ceiling_qps", JsonNumber(s.ceiling_qps)},
      {"ceiling_fraction", JsonNumber(s.ceiling_fraction)},
  };
  return absl::StrJoin(fields, ",\n",
                       [&](std::string* o, const std::pair<std::string, std::string>& f) {
                         absl::StrAppend(o, indent, workload::JsonQuote(f.first), ": ", f.second);
                       });
}

}  // namespace

std::string SummaryJson(std::span<const StudyResult> studies) {
  std::string out = "{\n  \"generator\": \"cacheroute-sim\",\n  \"studies\": {";
  bool first_study = true;
  for (const StudyResult& study : studies) {
    const StudyConfig& c = study.config;
    const std::vector<PolicySummary> summary = Summarize(study);
    const std::vector<uint32_t> gateway_counts = GatewaysRun(study);
    absl::StrAppendFormat(&out, "%s\n    %s: {\n", first_study ? "" : ",",
                          workload::JsonQuote(c.name));
    first_study = false;
    absl::StrAppendFormat(
        &out,
        "      \"description\": %s,\n      \"profile\": %s,\n      \"destinations\": %d,\n"
        "      \"top_k\": %d,\n      \"duration_s\": %s,\n      \"slo_s\": %s,\n"
        "      \"common_load_qps\": %s,\n      \"seeds\": [%s],\n      \"loads\": [%s],\n"
        "      \"gateway_counts\": [%s],\n"
        "      \"wall_s\": %s,\n      \"simulated_requests\": %d,\n      \"policies\": {",
        workload::JsonQuote(c.description), workload::JsonQuote(c.profile), c.destinations,
        c.workload.top_k, JsonNumber(c.duration_s), JsonNumber(c.primary_slo_s),
        JsonNumber(CommonLoad(study)), absl::StrJoin(c.seeds, ", "),
        absl::StrJoin(LoadsRun(study), ", ",
                      [](std::string* o, double l) { o->append(JsonNumber(l)); }),
        absl::StrJoin(gateway_counts, ", "), JsonNumber(study.wall_s), study.simulated_requests);
    // Each policy: its figures at the smallest G (the shape from before G was swept), then every
    // G's under "by_gateways".
    bool first_policy = true;
    for (const std::string& policy : c.policies) {
      std::vector<const PolicySummary*> rows;
      for (const PolicySummary& s : summary) {
        if (s.policy == policy) rows.push_back(&s);
      }
      if (rows.empty()) continue;
      absl::StrAppendFormat(&out, "%s\n        %s: {\n%s,\n          \"by_gateways\": {",
                            first_policy ? "" : ",", workload::JsonQuote(policy),
                            PolicyJsonFields(*rows.front(), c, "          "));
      first_policy = false;
      for (size_t i = 0; i < rows.size(); ++i) {
        absl::StrAppendFormat(&out, "%s\n            \"%d\": {\n%s\n            }",
                              i == 0 ? "" : ",", rows[i]->gateways,
                              PolicyJsonFields(*rows[i], c, "              "));
      }
      out += "\n          }\n        }";
    }
    out += "\n      }";
    if (study.has_drift) {
      const DriftResult& d = study.drift;
      absl::StrAppendFormat(
          &out,
          ",\n      \"drift\": {\"intervals\": %d, \"sigma\": %s, \"mean_cache_churn\": %s, "
          "\"mean_count_churn\": %s, \"transitions\": [%s]}",
          d.intervals, JsonNumber(d.sigma), JsonNumber(d.mean_cache_churn),
          JsonNumber(d.mean_count_churn),
          absl::StrJoin(d.transitions, ", ", [](std::string* o, const DriftTransition& t) {
            absl::StrAppendFormat(o,
                                  "{\"from\": %d, \"cache_churn\": %s, \"count_churn\": %s, "
                                  "\"jaccard_churn\": %s, \"fresh_imbalance\": %s, "
                                  "\"stale_imbalance\": %s}",
                                  t.from_interval, JsonNumber(t.cache_churn),
                                  JsonNumber(t.count_churn), JsonNumber(t.jaccard_churn),
                                  JsonNumber(t.fresh_imbalance), JsonNumber(t.stale_imbalance));
          }));
    }
    out += "\n    }";
  }
  out += "\n  }\n}\n";
  return out;
}

std::string P99Svg(const StudyResult& study) {
  Frame f;
  const uint32_t gateways = PlottedGateways(study);
  const std::vector<PolicySummary> summary = AtGateways(Summarize(study), gateways);
  const std::vector<double> loads = LoadsRun(study);
  const double slo = study.config.primary_slo_s;
  std::string out = SvgOpen(
      f, absl::StrFormat("%s: p99 TTFT against offered load, G = %d", study.config.name, gateways));
  // Log y over whole decades that hold every point and the SLO.
  double lo = slo, hi = slo;
  for (const PolicySummary& s : summary) {
    for (const auto& [load, v] : s.p99_ttft_s) {
      if (std::isfinite(v) && v > 0) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  }
  const double y_lo = std::pow(10, std::floor(std::log10(lo)));
  double y_hi = std::pow(10, std::ceil(std::log10(hi)));
  if (y_hi <= y_lo) y_hi = y_lo * 10;
  auto Y = [&](double v) {
    return f.top + f.plot_h() * (1 - (std::log10(v) - std::log10(y_lo)) /
                                         (std::log10(y_hi) - std::log10(y_lo)));
  };
  const double x_max = loads.empty() ? 1 : loads.back() * 1.05;
  auto X = [&](double l) { return f.left + f.plot_w() * l / x_max; };
  for (double d = y_lo; d <= y_hi * 1.0001; d *= 10) {
    out += YTick(f, Y(d), absl::StrFormat("%g", d));
    for (double m : {2.0, 5.0}) {
      if (d * m < y_hi) {
        absl::StrAppendFormat(&out,
                              "<line x1=\"%g\" y1=\"%.2f\" x2=\"%g\" y2=\"%.2f\" "
                              "stroke=\"#f0f0f0\"/>\n",
                              f.left, Y(d * m), f.left + f.plot_w(), Y(d * m));
      }
    }
  }
  for (double l : loads) {
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.2f\" y1=\"%g\" x2=\"%.2f\" y2=\"%g\" stroke=\"black\"/>\n"
                          "<text x=\"%.2f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n",
                          X(l), f.top + f.plot_h(), X(l), f.top + f.plot_h() + 5, X(l),
                          f.top + f.plot_h() + 18, LoadText(l));
  }
  out += Axes(f, "offered load (QPS)", "p99 TTFT (s, log scale)");
  // The SLO.
  absl::StrAppendFormat(&out,
                        "<line x1=\"%g\" y1=\"%.2f\" x2=\"%g\" y2=\"%.2f\" stroke=\"#c00000\" "
                        "stroke-dasharray=\"6 4\"/>\n<text x=\"%g\" y=\"%.2f\" fill=\"#c00000\" "
                        "text-anchor=\"end\">SLO %gs</text>\n",
                        f.left, Y(slo), f.left + f.plot_w(), Y(slo), f.left + f.plot_w() - 4,
                        Y(slo) - 4, slo);
  std::vector<std::string> names;
  for (size_t i = 0; i < summary.size(); ++i) {
    const PolicySummary& s = summary[i];
    names.push_back(s.policy);
    std::string points;
    std::string markers;
    for (const auto& [load, v] : s.p99_ttft_s) {
      if (!std::isfinite(v) || v <= 0) continue;
      absl::StrAppendFormat(&points, "%s%.2f,%.2f", points.empty() ? "" : " ", X(load), Y(v));
      absl::StrAppendFormat(&markers,
                            "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\">"
                            "<title>%s at %s QPS: %.3f s</title></circle>\n",
                            X(load), Y(v), Color(i), XmlEscape(s.policy), LoadText(load), v);
    }
    absl::StrAppendFormat(&out,
                          "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" "
                          "stroke-width=\"2\"/>\n",
                          points, Color(i));
    out += markers;
  }
  out += Legend(f, names, true);
  out += "</svg>\n";
  return out;
}

std::string CapacitySvg(const StudyResult& study) {
  const uint32_t gateways = PlottedGateways(study);
  const std::vector<PolicySummary> summary = AtGateways(Summarize(study), gateways);
  const std::vector<double> loads = LoadsRun(study);
  const double lo = loads.empty() ? 0 : loads.front();
  const double hi = loads.empty() ? 0 : loads.back();
  std::vector<MeanCi> values;
  std::vector<std::string> labels;
  for (const PolicySummary& s : summary) {
    values.push_back(s.capacity_primary.knee);
    labels.push_back(FormatCapacity(s.capacity_primary, lo, hi));
  }
  return BarChart(study,
                  absl::StrFormat("%s: SLO capacity at p99 ≤ %gs, G = %d (mean ± 95%% t)",
                                  study.config.name, study.config.primary_slo_s, gateways),
                  "capacity (QPS)", values, labels, 1.0, hi);
}

std::string KvHitSvg(const StudyResult& study) {
  const uint32_t gateways = PlottedGateways(study);
  const std::vector<PolicySummary> summary = AtGateways(Summarize(study), gateways);
  std::vector<MeanCi> values;
  std::vector<std::string> labels;
  for (const PolicySummary& s : summary) {
    values.push_back(s.kv_hit);
    labels.push_back(Percent(s.kv_hit));
  }
  const std::string common = LoadText(CommonLoad(study));
  return BarChart(study,
                  absl::StrFormat("%s: served KV hit at %s QPS, G = %d (mean ± 95%% t)",
                                  study.config.name, common, gateways),
                  "KV hit (%)", values, labels, 100.0, 100.0);
}

absl::Status WriteReport(std::span<const StudyResult> studies, const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("--out: cannot create directory \"", out_dir, "\": ", ec.message()));
  }
  auto write = [&](const std::string& name, const std::string& text) -> absl::Status {
    const std::filesystem::path path = std::filesystem::path(out_dir) / name;
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << text;
    file.close();
    if (!file) return absl::InternalError(absl::StrCat("cannot write \"", path.string(), "\""));
    return absl::OkStatus();
  };
  if (absl::Status s = write("runs.csv", RunsCsv(studies)); !s.ok()) return s;
  if (absl::Status s = write("report.md", ReportMarkdown(studies)); !s.ok()) return s;
  if (absl::Status s = write("summary.json", SummaryJson(studies)); !s.ok()) return s;
  for (const StudyResult& study : studies) {
    const std::string& name = study.config.name;
    if (absl::Status s = write(name + "-p99.svg", P99Svg(study)); !s.ok()) return s;
    if (absl::Status s = write(name + "-capacity.svg", CapacitySvg(study)); !s.ok()) return s;
    if (absl::Status s = write(name + "-kv-hit.svg", KvHitSvg(study)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace cacheroute::sim::study
