// Implementation of the replay comparison. See compare.h.
#include "tools/eval/replay/compare.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "tools/eval/workload/json_line.h"

namespace cacheroute::replay {
namespace {

using workload::JsonValue;

absl::StatusOr<double> Number(const JsonValue& object, const char* field, bool required = true) {
  const JsonValue* v = object.Find(field);
  if (v == nullptr) {
    if (!required) return 0.0;
    return absl::InvalidArgumentError(absl::StrCat("field \"", field, "\": missing"));
  }
  std::optional<double> d = v->AsDouble();
  if (!d) return absl::InvalidArgumentError(absl::StrCat("field \"", field, "\": not a number"));
  return *d;
}

std::string Escape(const std::string& s) {
  return absl::StrReplaceAll(s, {{"<", "&lt;"}, {">", "&gt;"}, {"&", "&amp;"}});
}

const char* kColors[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"};

double NiceMax(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (v <= m * p) return m * p;
  }
  return 10 * p;
}

// A chart's opening: the canvas, its title, and four grid lines from the x axis at `bottom` up
// `plot_h`, labelled from 0 to scale_max in `unit` at `left`. The marks follow, then CloseChart.
std::string OpenChart(const std::string& title, double width, double height, double left,
                      double bottom, double plot_h, double scale_max, const std::string& unit) {
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">%s</text>\n",
      width, height, width / 2, Escape(title));
  for (int t = 0; t <= 4; ++t) {
    const double v = scale_max * t / 4, y = bottom - plot_h * t / 4;
    absl::StrAppendFormat(
        &out,
        "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
        "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.3g%s</text>\n",
        left, y, width - 20, y, left - 6, y + 4, v, Escape(unit));
  }
  return out;
}

// A chart's x axis and its end.
std::string CloseChart(double left, double bottom, double width) {
  return absl::StrFormat(
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
      "</svg>\n",
      left, bottom, width - 20, bottom);
}

}  // namespace

absl::StatusOr<ReplayRun> ReadRun(const std::string& label, const std::string& json) {
  CACHEROUTE_ASSIGN_OR_RETURN(JsonValue parsed, workload::ParseJson(json));
  if (parsed.type != JsonValue::Type::kObject) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  ReplayRun run;
  run.label = label;
  struct Field {
    const char* name;
    double* out;
    bool required;
  };
  const Field fields[] = {{"requests", &run.requests, true},
                          {"succeeded", &run.succeeded, true},
                          {"failed", &run.failed, true},
                          {"ttft_p50_seconds", &run.ttft_p50_s, true},
                          {"ttft_p99_seconds", &run.ttft_p99_s, true},
                          {"latency_p50_seconds", &run.latency_p50_s, true},
                          {"latency_p99_seconds", &run.latency_p99_s, true},
                          {"kv_hit", &run.kv_hit, true},
                          {"planned", &run.planned, false},
                          {"request_imbalance", &run.request_imbalance, false},
                          {"prefill_imbalance", &run.prefill_imbalance, false},
                          {"shed", &run.shed, false},
                          {"shed_latency_p50_seconds", &run.shed_latency_p50_s, false},
                          {"shed_latency_p99_seconds", &run.shed_latency_p99_s, false},
                          {"slo_seconds", &run.slo_s, false},
                          {"within_slo", &run.within_slo, false},
                          {"goodput", &run.goodput, false}};
  for (const Field& f : fields) {
    CACHEROUTE_ASSIGN_OR_RETURN(*f.out, Number(parsed, f.name, f.required));
  }
  if (const JsonValue* dests = parsed.Find("destinations"); dests != nullptr) {
    if (dests->type != JsonValue::Type::kArray) {
      return absl::InvalidArgumentError("field \"destinations\": not an array");
    }
    for (size_t i = 0; i < dests->items.size(); ++i) {
      const JsonValue& d = dests->items[i];
      ReplayRunDestination out;
      const JsonValue* name = d.Find("name");
      if (name == nullptr || name->type != JsonValue::Type::kString) {
        return absl::InvalidArgumentError(
            absl::StrFormat("field \"destinations[%d].name\": missing or not a string", i));
      }
      out.name = name->text;
      absl::StatusOr<double> requests = Number(d, "requests");
      absl::StatusOr<double> prefill = Number(d, "prefill_tokens");
      absl::StatusOr<double> prompt = Number(d, "prompt_tokens", false);
      absl::StatusOr<double> cached = Number(d, "cached_tokens", false);
      for (const absl::StatusOr<double>* v : {&requests, &prefill, &prompt, &cached}) {
        if (!v->ok()) {
          return absl::InvalidArgumentError(
              absl::StrFormat("destinations[%d]: %s", i, v->status().message()));
        }
      }
      out.requests = *requests;
      out.prefill_tokens = *prefill;
      out.kv_hit = *prompt > 0 ? *cached / *prompt : 0;
      run.destinations.push_back(std::move(out));
    }
  }
  return run;
}

namespace {

// The compared figures, in order: a name and how one run shows it.
struct Row {
  const char* name;
  std::string (*format)(const ReplayRun&);
};
const Row kRows[] = {
    {"requests (failed)",
     [](const ReplayRun& r) { return absl::StrFormat("%.0f (%.0f)", r.requests, r.failed); }},
    {"served KV hit", [](const ReplayRun& r) { return absl::StrFormat("%.1f%%", 100 * r.kv_hit); }},
    {"TTFT p50", [](const ReplayRun& r) { return absl::StrFormat("%.3f s", r.ttft_p50_s); }},
    {"TTFT p99", [](const ReplayRun& r) { return absl::StrFormat("%.3f s", r.ttft_p99_s); }},
    {"latency p99", [](const ReplayRun& r) { return absl::StrFormat("%.3f s", r.latency_p99_s); }},
    {"prefill imbalance (max/mean)",
     [](const ReplayRun& r) { return absl::StrFormat("%.3f", r.prefill_imbalance); }},
    {"routed by the table",
     [](const ReplayRun& r) {
       return absl::StrFormat("%.1f%%", r.succeeded > 0 ? 100 * r.planned / r.succeeded : 0.0);
     }},
};
// Shown when a run shed requests, or had an SLO.
const Row kShedRows[] = {
    {"completed (within SLO)",
     [](const ReplayRun& r) {
       return r.slo_s > 0 ? absl::StrFormat("%.0f (%.0f)", r.succeeded, r.within_slo)
                          : absl::StrFormat("%.0f (-)", r.succeeded);
     }},
    {"shed (429)", [](const ReplayRun& r) { return absl::StrFormat("%.0f", r.shed); }},
    {"time to 429 p50 / p99",
     [](const ReplayRun& r) {
       return absl::StrFormat("%.3f / %.3f s", r.shed_latency_p50_s, r.shed_latency_p99_s);
     }},
    {"goodput within SLO",
     [](const ReplayRun& r) {
       return r.slo_s > 0 ? absl::StrFormat("%.1f/s (%.3g s)", r.goodput, r.slo_s)
                          : std::string("-");
     }},
};

// The rows shown for `runs`.
std::vector<const Row*> RowsFor(const std::vector<ReplayRun>& runs) {
  std::vector<const Row*> rows;
  for (const Row& row : kRows) rows.push_back(&row);
  const bool shedding = std::any_of(runs.begin(), runs.end(), [](const ReplayRun& r) {
    return r.shed > 0 || r.slo_s > 0;
  });
  if (shedding) {
    for (const Row& row : kShedRows) rows.push_back(&row);
  }
  return rows;
}

}  // namespace

namespace {

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

ReplayRun MedianRun(const std::string& label, const std::vector<ReplayRun>& repeats) {
  ReplayRun median = repeats.front();
  median.label = label;
  const auto fold = [&](double ReplayRun::*field) {
    std::vector<double> v;
    for (const ReplayRun& r : repeats) v.push_back(r.*field);
    median.*field = MedianOf(std::move(v));
  };
  for (double ReplayRun::*field :
       {&ReplayRun::requests, &ReplayRun::succeeded, &ReplayRun::failed, &ReplayRun::ttft_p50_s,
        &ReplayRun::ttft_p99_s, &ReplayRun::latency_p50_s, &ReplayRun::latency_p99_s,
        &ReplayRun::kv_hit, &ReplayRun::planned, &ReplayRun::request_imbalance,
        &ReplayRun::prefill_imbalance, &ReplayRun::shed, &ReplayRun::shed_latency_p50_s,
        &ReplayRun::shed_latency_p99_s, &ReplayRun::slo_s, &ReplayRun::within_slo,
        &ReplayRun::goodput}) {
    fold(field);
  }
  for (ReplayRunDestination& d : median.destinations) {
    std::vector<double> requests, prefill, hit;
    for (const ReplayRun& r : repeats) {
      for (const ReplayRunDestination& x : r.destinations) {
        if (x.name != d.name) continue;
        requests.push_back(x.requests);
        prefill.push_back(x.prefill_tokens);
        hit.push_back(x.kv_hit);
      }
    }
    d.requests = MedianOf(std::move(requests));
    d.prefill_tokens = MedianOf(std::move(prefill));
    d.kv_hit = MedianOf(std::move(hit));
  }
  return median;
}

std::string CompareTable(const std::vector<ReplayRun>& runs) {
  // Each column as wide as its label, at least 14.
  std::vector<int> width;
  for (const ReplayRun& r : runs) width.push_back(std::max<int>(14, r.label.size()));
  std::string out = absl::StrFormat("  %-26s", "");
  for (size_t i = 0; i < runs.size(); ++i) {
    absl::StrAppendFormat(&out, "  %*s", width[i], runs[i].label);
  }
  out += "\n";
  for (const Row* row : RowsFor(runs)) {
    absl::StrAppendFormat(&out, "  %-26s", row->name);
    for (size_t i = 0; i < runs.size(); ++i) {
      absl::StrAppendFormat(&out, "  %*s", width[i], row->format(runs[i]));
    }
    out += "\n";
  }
  return out;
}

std::string CompareMarkdown(const std::vector<ReplayRun>& runs, const std::string& title) {
  std::string out = absl::StrCat("# ", title, "\n\n| |");
  for (const ReplayRun& r : runs) absl::StrAppend(&out, " ", r.label, " |");
  out += "\n| --- |";
  for (size_t i = 0; i < runs.size(); ++i) out += " --- |";
  out += "\n";
  for (const Row* row : RowsFor(runs)) {
    absl::StrAppend(&out, "| ", row->name, " |");
    for (const ReplayRun& r : runs) absl::StrAppend(&out, " ", row->format(r), " |");
    out += "\n";
  }
  out +=
      "\n![Served KV hit](kv-hit.svg)\n![TTFT p99](ttft-p99.svg)\n"
      "![Prefill work per destination](destination-load.svg)\n";
  for (const ReplayRun& r : runs) {
    if (r.destinations.empty()) continue;
    absl::StrAppend(&out, "\n## ", r.label,
                    ": per destination\n\n| destination | requests | prefill tokens | KV hit |\n"
                    "| --- | --- | --- | --- |\n");
    for (const ReplayRunDestination& d : r.destinations) {
      absl::StrAppendFormat(&out, "| %s | %.0f | %.0f | %.1f%% |\n", d.name, d.requests,
                            d.prefill_tokens, 100 * d.kv_hit);
    }
  }
  return out;
}

std::string BarChartSvg(const std::string& title, const std::vector<std::string>& labels,
                        const std::vector<double>& values, const std::string& unit) {
  const double width = 120.0 + 110.0 * static_cast<double>(values.size()), height = 320;
  const double left = 70, bottom = 260, top = 50, plot_h = bottom - top;
  double max_v = 0;
  for (double v : values) max_v = std::max(max_v, v);
  const double scale_max = NiceMax(max_v);
  std::string out = OpenChart(title, width, height, left, bottom, plot_h, scale_max, unit);
  for (size_t i = 0; i < values.size(); ++i) {
    const double x = left + 30 + 110.0 * static_cast<double>(i);
    const double h = scale_max > 0 ? plot_h * values[i] / scale_max : 0;
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"70\" height=\"%.1f\" fill=\"%s\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g%s</text>\n"
                          "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n",
                          x, bottom - h, h, kColors[i % 6], x + 35, bottom - h - 5, values[i],
                          Escape(unit), x + 35, bottom + 18, Escape(labels[i]));
  }
  return out + CloseChart(left, bottom, width);
}

std::string DestinationLoadSvg(const std::vector<ReplayRun>& runs) {
  std::vector<std::string> names;
  for (const ReplayRun& r : runs) {
    for (const ReplayRunDestination& d : r.destinations) {
      if (std::find(names.begin(), names.end(), d.name) == names.end()) names.push_back(d.name);
    }
  }
  std::sort(names.begin(), names.end());
  const double group = 30.0 * static_cast<double>(std::max<size_t>(runs.size(), 1)) + 30;
  const double width = 120 + group * static_cast<double>(std::max<size_t>(names.size(), 1));
  const double height = 340, left = 80, bottom = 260, top = 50, plot_h = bottom - top;
  double max_v = 0;
  for (const ReplayRun& r : runs) {
    for (const ReplayRunDestination& d : r.destinations) max_v = std::max(max_v, d.prefill_tokens);
  }
  const double scale_max = NiceMax(max_v);
  std::string out = OpenChart("Prefill work per destination (prompt tokens not cached)", width,
                              height, left, bottom, plot_h, scale_max, "");
  for (size_t n = 0; n < names.size(); ++n) {
    const double gx = left + 20 + group * static_cast<double>(n);
    for (size_t i = 0; i < runs.size(); ++i) {
      double v = 0;
      for (const ReplayRunDestination& d : runs[i].destinations) {
        if (d.name == names[n]) v = d.prefill_tokens;
      }
      const double h = scale_max > 0 ? plot_h * v / scale_max : 0;
      absl::StrAppendFormat(
          &out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"26\" height=\"%.1f\" fill=\"%s\"/>\n",
          gx + 30.0 * static_cast<double>(i), bottom - h, h, kColors[i % 6]);
    }
    absl::StrAppendFormat(&out, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n",
                          gx + 15.0 * static_cast<double>(runs.size()), bottom + 18,
                          Escape(names[n]));
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const double lx = left + 140.0 * static_cast<double>(i);
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n"
                          "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                          lx, bottom + 40, kColors[i % 6], lx + 16, bottom + 51,
                          Escape(runs[i].label));
  }
  return out + CloseChart(left, bottom, width);
}

}  // namespace cacheroute::replay
