// See online_output.h. Table layouts follow plan_output.cc: a summary of labelled rows, then
// lists with right-aligned numbers, then the load chart (load_chart.h).
#include "client/online_output.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/json_writer.h"
#include "client/load_chart.h"
#include "client/text_format.h"
#include "proto/table/table_snapshot.h"

namespace cacheroute::client {
namespace {

constexpr size_t kMaxKeyColumns = 40;
constexpr size_t kMaxNameColumns = 24;
constexpr size_t kMaxListedDestinations = 8;

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

std::string Percent(double part, double whole) {
  if (whole <= 0) return "n/a";
  return absl::StrFormat("%.1f%%", 100.0 * part / whole);
}

void Row(std::string* out, absl::string_view label, absl::string_view value) {
  absl::StrAppendFormat(out, "  %-22s %s\n", label, value);
}

std::string KeyIdText(uint64_t key_id) { return absl::StrFormat("0x%016x", key_id); }

// A key for a terminal cell: the readable key, or its id when the gateway sent none.
std::string KeyCell(absl::string_view key, uint64_t key_id, size_t* columns) {
  if (key.empty()) {
    std::string id = absl::StrCat("#", KeyIdText(key_id));
    *columns = id.size();
    return id;
  }
  return DisplayText(key, kMaxKeyColumns, columns);
}

// Destination indices as names (when `names` covers them) or "#index", cut after a few.
std::string DestinationCell(std::span<const uint32_t> destinations,
                            std::span<const std::string> names) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < destinations.size() && i < kMaxListedDestinations; ++i) {
    const uint32_t d = destinations[i];
    shown.push_back(d < names.size() ? DisplayText(names[d], kMaxNameColumns)
                                     : absl::StrCat("#", d));
  }
  std::string out = absl::StrJoin(shown, ",");
  if (destinations.size() > kMaxListedDestinations) {
    absl::StrAppend(&out, ",… (+", destinations.size() - kMaxListedDestinations, " more)");
  }
  return out;
}

std::string PadLeft(absl::string_view s, size_t columns, size_t width) {
  return absl::StrCat(std::string(width > columns ? width - columns : 0, ' '), s);
}
std::string PadRight(absl::string_view s, size_t columns, size_t width) {
  return absl::StrCat(s, std::string(width > columns ? width - columns : 0, ' '));
}

// A left-aligned text table: every cell is (text, display columns); `right[c]` right-aligns
// column c.
struct Cell {
  std::string text;
  size_t columns = 0;
};
Cell Text(std::string s) {
  const size_t n = s.size();
  return {std::move(s), n};
}
void AppendGrid(std::string* out, const std::vector<std::vector<Cell>>& rows,
                const std::vector<bool>& right) {
  std::vector<size_t> width(right.size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].columns);
  }
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c) {
      line.append(" ");
      const bool last = c + 1 == row.size();
      if (right[c]) {
        line.append(PadLeft(row[c].text, row[c].columns, width[c]));
      } else {
        line.append(last ? row[c].text : PadRight(row[c].text, row[c].columns, width[c]));
      }
      if (!last) line.append(" ");
    }
    absl::StrAppend(out, line, "\n");
  }
}

std::vector<bool> DrainedFlags(const v1::GetStatusResponse& status) {
  std::vector<bool> drained(status.destinations_size(), false);
  for (int i = 0; i < status.drained_size() && i < status.destinations_size(); ++i) {
    drained[i] = status.drained(i);
  }
  return drained;
}

std::vector<double> LoadsFor(const v1::GetStatusResponse& status) {
  std::vector<double> loads(status.destinations_size(), 0.0);
  for (int i = 0; i < status.expected_loads_size() && i < status.destinations_size(); ++i) {
    loads[i] = status.expected_loads(i);
  }
  return loads;
}

}  // namespace

absl::StatusOr<OnlineFormat> ParseOnlineFormat(absl::string_view name) {
  if (name == "table") return OnlineFormat::kTable;
  if (name == "json") return OnlineFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--format: expected table or json, got ", QuoteForMessage(name)));
}

absl::StatusOr<v1::Version> ParseVersion(absl::string_view flag, absl::string_view text) {
  const auto error = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected a version EPOCH.NUMBER (e.g. 1718000000.42), got ",
                     QuoteForMessage(text)));
  };
  const size_t dot = text.find('.');
  if (dot == absl::string_view::npos) return error();
  uint64_t parts[2] = {0, 0};
  const absl::string_view fields[2] = {text.substr(0, dot), text.substr(dot + 1)};
  for (int i = 0; i < 2; ++i) {
    const absl::string_view f = fields[i];
    const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), parts[i]);
    if (f.empty() || ec != std::errc() || end != f.data() + f.size()) return error();
  }
  if (parts[0] == 0 && parts[1] == 0) return error();
  v1::Version version;
  version.set_epoch(parts[0]);
  version.set_number(parts[1]);
  return version;
}

std::string VersionText(const v1::Version& version) {
  if (version.epoch() == 0 && version.number() == 0) return "none";
  return absl::StrCat(version.epoch(), ".", version.number());
}

std::string TimeText(int64_t unix_ms) {
  if (unix_ms == 0) return "never";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string AgeText(int64_t unix_ms, int64_t now_unix_ms) {
  if (unix_ms == 0) return "";
  const absl::Duration age = absl::Milliseconds(now_unix_ms - unix_ms);
  const absl::Duration shown = absl::Trunc(absl::AbsDuration(age), absl::Seconds(1));
  if (shown == absl::ZeroDuration()) return "0s ago";
  if (age < absl::ZeroDuration()) return absl::StrCat("in ", absl::FormatDuration(shown));
  return absl::StrCat(absl::FormatDuration(shown), " ago");
}

// ---- status

namespace {

// One object per destination: index, name, drained, expected load.
void AppendDestinationsJson(JsonWriter& json, const v1::GetStatusResponse& status,
                            const std::vector<bool>& drained, const std::vector<double>& loads) {
  for (int i = 0; i < status.destinations_size(); ++i) {
    json.BeginObject()
        .Key("index")
        .Uint(i)
        .Key("name")
        .String(status.destinations(i))
        .Key("drained")
        .Bool(drained[i])
        .Key("expected_load")
        .Number(loads[i])
        .EndObject();
  }
}

}  // namespace

std::string FormatStatus(const v1::GetStatusResponse& status, absl::string_view address,
                         int64_t now_unix_ms, OnlineFormat format) {
  const std::vector<bool> drained = DrainedFlags(status);
  const std::vector<double> loads = LoadsFor(status);
  if (format == OnlineFormat::kJson) {
    JsonWriter json;
    json.BeginObject().Key("planner").String(address);
    json.Key("version").Version(status.version());
    json.Key("plan_unix_ms").Int(status.plan_unix_ms());
    json.Key("build_seconds").Number(status.build_seconds());
    json.Key("keys_known").Uint(status.keys_known());
    json.Key("keys_admitted").Uint(status.keys_admitted());
    json.Key("slots_used").Uint(status.slots_used());
    json.Key("slot_capacity").Uint(status.slot_capacity());
    json.Key("imbalance").Number(status.imbalance());
    json.Key("total_rate").Number(status.total_rate());
    json.Key("cold_tail_rate").Number(status.cold_tail_rate());
    json.Key("q_cap").Number(status.q_cap());
    json.Key("slots_per_destination").Uint(status.slots_per_destination());
    json.Key("destinations").BeginArray();
    AppendDestinationsJson(json, status, drained, loads);
    json.EndArray().Key("gateways").BeginArray();
    for (const v1::GatewayStatus& g : status.gateways()) {
      json.BeginObject()
          .Key("gateway_id")
          .String(g.gateway_id())
          .Key("last_sequence")
          .Uint(g.last_sequence())
          .Key("last_report_unix_ms")
          .Int(g.last_report_unix_ms())
          .Key("subscribed")
          .Bool(g.subscribed())
          .Key("acked_version")
          .Version(g.acked_version())
          .EndObject();
    }
    json.EndArray();
    json.Key("reports_accepted").Uint(status.reports_accepted());
    json.Key("reports_duplicate").Uint(status.reports_duplicate());
    // The last plan's byte-aware figures; null when it planned by slots.
    json.Key("byte_aware");
    if (status.has_byte_aware()) {
      const v1::ByteAwareStatus& b = status.byte_aware();
      json.BeginObject()
          .Key("kv_budget_tokens")
          .Number(b.kv_budget_tokens())
          .Key("kv_used_tokens")
          .Number(b.kv_used_tokens())
          .Key("saved_work")
          .Number(b.saved_work())
          .Key("possible_saved_work")
          .Number(b.possible_saved_work())
          .Key("total_work")
          .Number(b.total_work())
          .Key("work_imbalance")
          .Number(b.work_imbalance())
          .Key("measured_keys")
          .Uint(b.measured_keys())
          .Key("turnover_seconds")
          .Number(b.turnover_seconds())
          .EndObject();
    } else {
      json.Null();
    }
    // The replica's part in a replicated planner (docs/ha.md); null for a planner alone.
    json.Key("replica");
    if (status.has_ha()) {
      const v1::HaStatus& ha = status.ha();
      json.BeginObject()
          .Key("role")
          .String(ha.role())
          .Key("replica_id")
          .String(ha.replica_id())
          .Key("leader_id")
          .String(ha.leader_id())
          .Key("leader_address")
          .String(ha.leader_address())
          .Key("term_lease_id")
          .Int(ha.term_lease_id())
          .Key("term_revision")
          .Int(ha.term_revision())
          .Key("table_watch_live")
          .Bool(ha.table_watch_live())
          .Key("ready")
          .Bool(ha.ready_reason().empty())
          .Key("ready_reason")
          .String(ha.ready_reason())
          .EndObject();
    } else {
      json.Null();
    }
    json.EndObject();
    return json.Line();
  }

  std::string out = absl::StrCat("Planner ", address, "\n");
  if (status.has_ha()) {
    const v1::HaStatus& ha = status.ha();
    const std::string leader =
        ha.leader_id().empty() ? std::string("none known")
                               : absl::StrCat(ha.leader_id(), " (", ha.leader_address(), ")");
    Row(&out, "replica",
        ha.role() == "leader"
            ? absl::StrCat(ha.replica_id(), ", leader (term: lease ", ha.term_lease_id(),
                           ", revision ", ha.term_revision(), ")")
            : absl::StrCat(ha.replica_id(), ", follower; leader ", leader, "; table watch ",
                           ha.table_watch_live() ? "live" : "down"));
    Row(&out, "ready", ha.ready_reason().empty() ? "yes" : absl::StrCat("no: ", ha.ready_reason()));
  }
  const bool planned = !(status.version().epoch() == 0 && status.version().number() == 0);
  Row(&out, "version", planned ? VersionText(status.version()) : "none (no plan yet)");
  const std::string age = AgeText(status.plan_unix_ms(), now_unix_ms);
  Row(&out, "last plan",
      age.empty() ? TimeText(status.plan_unix_ms())
                  : absl::StrCat(TimeText(status.plan_unix_ms()), "  (", age, ")"));
  Row(&out, "build time", absl::StrFormat("%.3f ms", status.build_seconds() * 1e3));
  Row(&out, "keys known", absl::StrCat(status.keys_known()));
  Row(&out, "keys admitted", absl::StrCat(status.keys_admitted()));
  Row(&out, "slots used",
      absl::StrFormat("%d / %d  (%s)", status.slots_used(), status.slot_capacity(),
                      Percent(static_cast<double>(status.slots_used()),
                              static_cast<double>(status.slot_capacity()))));
  Row(&out, "q_cap, W",
      absl::StrFormat("%s req/s per assignment, %d slots per destination", Num(status.q_cap()),
                      status.slots_per_destination()));
  Row(&out, "total rate", absl::StrCat(Num(status.total_rate()), " req/s"));
  Row(&out, "cold-tail rate",
      absl::StrFormat("%s  (%s of total)", Num(status.cold_tail_rate()),
                      Percent(status.cold_tail_rate(), status.total_rate())));
  Row(&out, "imbalance (max/mean)", absl::StrFormat("%.4f", status.imbalance()));
  if (status.has_byte_aware()) {
    const v1::ByteAwareStatus& b = status.byte_aware();
    Row(&out, "byte-aware KV",
        absl::StrFormat("%s / %s planned-prefix tokens  (%s)", Num(b.kv_used_tokens()),
                        Num(b.kv_budget_tokens()),
                        Percent(b.kv_used_tokens(), b.kv_budget_tokens())));
    Row(&out, "saved work",
        absl::StrFormat("%s prefill tokens/s  (%s of what admitting every key would save)",
                        Num(b.saved_work()), Percent(b.saved_work(), b.possible_saved_work())));
    Row(&out, "work imbalance",
        absl::StrFormat("%.4f  (%s tokens/s expected; %d keys with measured sizes)",
                        b.work_imbalance(), Num(b.total_work()), b.measured_keys()));
  }
  Row(&out, "reports", absl::StrCat(status.reports_accepted(), " accepted, ",
                                    status.reports_duplicate(), " duplicate"));
  const size_t drained_count = std::count(drained.begin(), drained.end(), true);
  Row(&out, "destinations",
      absl::StrFormat("%d  (%d drained)", status.destinations_size(), drained_count));

  const std::vector<std::string> names(status.destinations().begin(), status.destinations().end());
  if (status.expected_loads_size() == status.destinations_size()) {
    AppendLoadChart(&out, names, loads, drained);
  }

  absl::StrAppend(&out, "\nGateways (", status.gateways_size(), ")\n");
  if (status.gateways_size() == 0) {
    out.append("  none has reported or subscribed yet\n");
    return out;
  }
  std::vector<std::vector<Cell>> rows;
  rows.push_back(
      {Text("gateway"), Text("last report"), Text("sequence"), Text("stream"), Text("acked")});
  for (const v1::GatewayStatus& g : status.gateways()) {
    Cell id;
    id.text = DisplayText(g.gateway_id(), kMaxKeyColumns, &id.columns);
    std::string report = "never";
    if (g.last_report_unix_ms() != 0) {
      report = absl::StrCat(TimeText(g.last_report_unix_ms()), " (",
                            AgeText(g.last_report_unix_ms(), now_unix_ms), ")");
    }
    rows.push_back({std::move(id), Text(report),
                    Text(g.last_sequence() == 0 ? "-" : absl::StrCat(g.last_sequence())),
                    Text(g.subscribed() ? "subscribed" : "-"),
                    Text(g.acked_version().epoch() == 0 && g.acked_version().number() == 0
                             ? "-"
                             : VersionText(g.acked_version()))});
  }
  AppendGrid(&out, rows, {false, false, true, false, false});
  return out;
}

std::string FormatDestinations(const v1::GetStatusResponse& status, OnlineFormat format) {
  const std::vector<bool> drained = DrainedFlags(status);
  const std::vector<double> loads = LoadsFor(status);
  if (format == OnlineFormat::kJson) {
    JsonWriter json;
    json.BeginObject().Key("version").Version(status.version());
    json.Key("destinations").BeginArray();
    AppendDestinationsJson(json, status, drained, loads);
    json.EndArray().EndObject();
    return json.Line();
  }
  std::string out = absl::StrFormat(
      "%d destinations (%d drained), version %s\n", status.destinations_size(),
      std::count(drained.begin(), drained.end(), true), VersionText(status.version()));
  std::vector<std::vector<Cell>> rows;
  rows.push_back({Text("index"), Text("name"), Text("state"), Text("expected load")});
  for (int i = 0; i < status.destinations_size(); ++i) {
    Cell name;
    name.text = DisplayText(status.destinations(i), kMaxKeyColumns, &name.columns);
    rows.push_back({Text(absl::StrCat(i)), std::move(name), Text(drained[i] ? "drained" : "active"),
                    Text(Num(loads[i]))});
  }
  AppendGrid(&out, rows, {true, false, false, true});
  return out;
}

// ---- show

absl::StatusOr<std::string> FormatRoutingTable(const v1::RoutingTable& table, OnlineFormat format,
                                               size_t top) {
  // The planner validates what it sends; a table that fails here is a planner bug, not bad input.
  if (absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> checked =
          table::TableSnapshot::FromProto(table);
      !checked.ok()) {
    return absl::InternalError(
        absl::StrCat("the planner sent an invalid table: ", checked.status().message()));
  }
  const std::span<const double> loads(table.expected_loads().data(), table.expected_loads_size());
  double total_rate = 0, admitted_rate = 0, max_load = 0, saved_work = 0;
  uint64_t slots_used = 0;
  bool byte_aware = false;  // the planner sent each key's reusable tokens and saved work
  for (const double load : loads) {
    total_rate += load;
    max_load = std::max(max_load, load);
  }
  for (const v1::Assignment& a : table.assignments()) {
    admitted_rate += a.rate();
    slots_used += a.destinations_size();
    byte_aware = byte_aware || a.has_reusable_tokens();
    saved_work += a.saved_work();
  }
  // A destination with no expected load at all is drained (the table does not say so directly);
  // like the planner's mean_load, the mean leaves it out.
  std::vector<bool> idle(loads.size(), false);
  size_t carrying = 0;
  for (size_t r = 0; r < loads.size(); ++r) {
    idle[r] = loads[r] == 0 && total_rate > 0;
    if (!idle[r]) ++carrying;
  }
  const double mean_load = carrying == 0 ? 0.0 : total_rate / static_cast<double>(carrying);
  const double imbalance = LoadImbalance(loads, idle);
  const double cold_tail_rate = std::max(0.0, total_rate - admitted_rate);

  if (format == OnlineFormat::kJson) {
    // The `plan` schema (plan_output.cc), field for field, plus "version" and each key's id.
    std::string out = "{\n  \"version\": {\"epoch\": ";
    absl::StrAppend(&out, table.version().epoch(), ", \"number\": ", table.version().number(),
                    "},\n  \"assignments\": [");
    for (int i = 0; i < table.assignments_size(); ++i) {
      const v1::Assignment& a = table.assignments(i);
      out.append(i == 0 ? "\n    {\"key\": " : ",\n    {\"key\": ");
      AppendJsonString(&out, a.key());
      out.append(", \"rate\": ");
      AppendShortestDouble(&out, a.rate());
      absl::StrAppend(&out, ", \"destinations\": [", absl::StrJoin(a.destinations(), ", "),
                      "], \"key_id\": ", a.key_id());
      if (a.has_reusable_tokens()) {
        out.append(", \"reusable_tokens\": ");
        AppendShortestDouble(&out, a.reusable_tokens());
      }
      if (a.has_saved_work()) {
        out.append(", \"saved_work\": ");
        AppendShortestDouble(&out, a.saved_work());
      }
      out.append("}");
    }
    out.append(table.assignments_size() == 0 ? "],\n" : "\n  ],\n");
    out.append("  \"loads\": [");
    for (size_t r = 0; r < loads.size(); ++r) {
      if (r > 0) out.append(", ");
      AppendShortestDouble(&out, loads[r]);
    }
    out.append("],\n  \"stats\": {\n");
    const auto field = [&](absl::string_view name, auto value, bool last = false) {
      absl::StrAppend(&out, "    \"", name, "\": ");
      if constexpr (std::is_floating_point_v<decltype(value)>) {
        AppendShortestDouble(&out, value);
      } else {
        absl::StrAppend(&out, value);
      }
      out.append(last ? "\n" : ",\n");
    };
    field("admitted_keys", static_cast<uint64_t>(table.assignments_size()));
    field("slots_used", slots_used);
    field("imbalance", imbalance);
    field("cold_tail_rate", cold_tail_rate);
    field("total_rate", total_rate);
    field("admitted_rate", admitted_rate);
    field("max_load", max_load);
    field("mean_load", mean_load);
    field("destinations", static_cast<uint64_t>(loads.size()), /*last=*/true);
    out.append("  }\n}\n");
    return out;
  }

  const std::vector<std::string> names(table.destinations().begin(), table.destinations().end());
  std::string out =
      absl::StrFormat("Routing table %s, built %s, TTL %s s\n", VersionText(table.version()),
                      TimeText(table.built_unix_ms()), Num(table.ttl_seconds()));
  Row(&out, "destinations",
      absl::StrFormat("%d  (%d without load)", loads.size(), loads.size() - carrying));
  Row(&out, "admitted keys", absl::StrCat(table.assignments_size()));
  Row(&out, "slots used", absl::StrCat(slots_used));
  Row(&out, "total rate", absl::StrCat(Num(total_rate), " req/s"));
  Row(&out, "admitted rate",
      absl::StrFormat("%s  (%s of total)", Num(admitted_rate), Percent(admitted_rate, total_rate)));
  Row(&out, "cold-tail rate",
      absl::StrFormat("%s  (%s of total)", Num(cold_tail_rate),
                      Percent(cold_tail_rate, total_rate)));
  Row(&out, "imbalance (max/mean)",
      absl::StrFormat("%.4f  (max load %s, mean load %s)", imbalance, Num(max_load),
                      Num(mean_load)));
  if (byte_aware) {
    Row(&out, "saved work", absl::StrCat(Num(saved_work), " prefill tokens/s (byte-aware plan)"));
  }

  const size_t shown = std::min<size_t>(top, table.assignments_size());
  if (shown == 0) {
    absl::StrAppend(&out, "\nNo keys listed (", table.assignments_size(), " admitted).\n");
  } else {
    absl::StrAppendFormat(&out, "\nHottest %d of %d admitted keys\n", shown,
                          table.assignments_size());
    std::vector<std::vector<Cell>> rows;
    rows.push_back({Text("rank"), {"key", 3}, Text("rate"), Text("k")});
    if (byte_aware) {
      rows.back().push_back(Text("reusable"));
      rows.back().push_back(Text("saved/s"));
    }
    rows.back().push_back(Text("destinations"));
    for (size_t i = 0; i < shown; ++i) {
      const v1::Assignment& a = table.assignments(static_cast<int>(i));
      Cell key;
      key.text = KeyCell(a.key(), a.key_id(), &key.columns);
      Cell destinations;
      destinations.text = DestinationCell(
          std::span<const uint32_t>(a.destinations().data(), a.destinations_size()), names);
      rows.push_back({Text(absl::StrCat(i + 1)), std::move(key), Text(Num(a.rate())),
                      Text(absl::StrCat(a.destinations_size()))});
      if (byte_aware) {
        rows.back().push_back(Text(Num(a.reusable_tokens())));
        rows.back().push_back(Text(Num(a.saved_work())));
      }
      rows.back().push_back(std::move(destinations));
    }
    if (byte_aware) {
      AppendGrid(&out, rows, {true, false, true, true, true, true, false});
    } else {
      AppendGrid(&out, rows, {true, false, true, true, false});
    }
  }
  AppendLoadChart(&out, names, loads, idle, "no load");
  return out;
}

// ---- explain

std::string FormatExplain(const v1::ExplainResponse& explain, const v1::GetStatusResponse* status,
                          OnlineFormat format) {
  if (format == OnlineFormat::kJson) {
    JsonWriter json;
    json.BeginObject()
        .Key("key")
        .String(explain.key())
        .Key("key_id")
        .Uint(explain.key_id())
        .Key("version")
        .Version(explain.version())
        .Key("known")
        .Bool(explain.known())
        .Key("rate")
        .Number(explain.rate())
        .Key("k")
        .Uint(explain.k())
        .Key("k_capped")
        .Bool(explain.k_capped())
        .Key("rank")
        .Uint(explain.rank())
        .Key("admitted")
        .Bool(explain.admitted())
        .Key("reason")
        .String(explain.reason());
    if (explain.byte_aware()) {
      json.Key("reusable_tokens")
          .Number(explain.reusable_tokens())
          .Key("prompt_tokens")
          .Number(explain.prompt_tokens())
          .Key("reusable_measured")
          .Bool(explain.reusable_measured())
          .Key("saved_work")
          .Number(explain.saved_work())
          .Key("work")
          .Number(explain.work());
    }
    json.Key("destinations").BeginArray();
    for (int i = 0; i < explain.destinations_size(); ++i) {
      json.BeginObject().Key("index").Uint(explain.destinations(i));
      if (status != nullptr &&
          explain.destinations(i) < static_cast<uint32_t>(status->destinations_size())) {
        json.Key("name").String(status->destinations(explain.destinations(i)));
      }
      json.Key("expected_load")
          .Number(i < explain.expected_loads_size() ? explain.expected_loads(i) : 0.0)
          .EndObject();
    }
    json.EndArray().EndObject();
    return json.Line();
  }

  std::string out = "Key ";
  if (explain.key().empty()) {
    absl::StrAppend(&out, "id ", explain.key_id(), " (", KeyIdText(explain.key_id()), ")\n");
  } else {
    absl::StrAppend(&out, QuoteForMessage(explain.key()), "  (id ", explain.key_id(), " = ",
                    KeyIdText(explain.key_id()), ")\n");
  }
  Row(&out, "version", VersionText(explain.version()));
  if (!explain.known()) {
    Row(&out, "known", "no");
    Row(&out, "admitted", absl::StrCat("no: ", explain.reason()));
    return out;
  }
  Row(&out, "rate", absl::StrCat(Num(explain.rate()), " req/s"));
  Row(&out, "rank", absl::StrCat(explain.rank(), "  (1 = hottest)"));
  Row(&out, "k",
      absl::StrCat(explain.k(), explain.k_capped()     ? "  (capped at the active destinations)"
                                : explain.byte_aware() ? "  (from its expected work)"
                                                       : "  (max(1, ⌈rate/q_cap⌉))"));
  if (explain.byte_aware()) {
    Row(&out, "reusable prefix",
        absl::StrFormat(
            "%s of %s prompt tokens  (%s)", Num(explain.reusable_tokens()),
            Num(explain.prompt_tokens()),
            explain.reusable_measured() ? "measured" : "not measured: the measured keys' means"));
    Row(&out, "saved work",
        absl::StrFormat("%s prefill tokens/s  (expected work %s tokens/s)",
                        Num(explain.saved_work()), Num(explain.work())));
  }
  if (!explain.admitted()) {
    Row(&out, "admitted", absl::StrCat("no: ", explain.reason()));
    return out;
  }
  Row(&out, "admitted", "yes");
  absl::StrAppend(&out, "\nDestinations (", explain.destinations_size(), ")\n");
  std::vector<std::vector<Cell>> rows;
  rows.push_back({Text("dest"), Text("name"), Text("expected load")});
  for (int i = 0; i < explain.destinations_size(); ++i) {
    const uint32_t d = explain.destinations(i);
    Cell name = Text("?");
    if (status != nullptr && d < static_cast<uint32_t>(status->destinations_size())) {
      name.text = DisplayText(status->destinations(d), kMaxKeyColumns, &name.columns);
    }
    rows.push_back({Text(absl::StrCat(d)), std::move(name),
                    Text(Num(i < explain.expected_loads_size() ? explain.expected_loads(i) : 0))});
  }
  AppendGrid(&out, rows, {true, false, true});
  return out;
}

// ---- diff

std::string FormatDiff(const v1::DiffResponse& diff, OnlineFormat format, size_t top) {
  using Moves = google::protobuf::RepeatedPtrField<v1::KeyMove>;
  if (format == OnlineFormat::kJson) {
    JsonWriter json;
    json.BeginObject().Key("from").Version(diff.from()).Key("to").Version(diff.to());
    json.Key("churn").Number(diff.churn());
    const auto moves = [&](absl::string_view name, const Moves& list) {
      json.Key(name).BeginArray();
      for (const v1::KeyMove& m : list) {
        json.BeginObject().Key("key").String(m.key()).Key("key_id").Uint(m.key_id());
        json.Key("from_destinations").BeginArray();
        for (const uint32_t d : m.from_destinations()) json.Uint(d);
        json.EndArray().Key("to_destinations").BeginArray();
        for (const uint32_t d : m.to_destinations()) json.Uint(d);
        json.EndArray().EndObject();
      }
      json.EndArray();
    };
    moves("moved", diff.moved());
    moves("added", diff.added());
    moves("removed", diff.removed());
    json.EndObject();
    return json.Line();
  }

  std::string out =
      absl::StrCat("Diff ", VersionText(diff.from()), " → ", VersionText(diff.to()), "\n");
  Row(&out, "churn",
      absl::StrFormat("%.2f%%  (share of %s's admitted rate that starts cold)",
                      100.0 * diff.churn(), VersionText(diff.to())));
  Row(&out, "moved keys", absl::StrCat(diff.moved_size()));
  Row(&out, "added keys", absl::StrCat(diff.added_size()));
  Row(&out, "removed keys", absl::StrCat(diff.removed_size()));
  const auto section = [&](absl::string_view title, const Moves& list) {
    if (list.empty()) return;
    const size_t shown = std::min<size_t>(top, list.size());
    absl::StrAppendFormat(
        &out, "\n%s (%d%s)\n", title, list.size(),
        shown < static_cast<size_t>(list.size()) ? absl::StrFormat(", first %d", shown) : "");
    if (shown == 0) return;
    std::vector<std::vector<Cell>> rows;
    rows.push_back({{"key", 3}, Text("from"), Text("to")});
    for (size_t i = 0; i < shown; ++i) {
      const v1::KeyMove& m = list[static_cast<int>(i)];
      Cell key;
      key.text = KeyCell(m.key(), m.key_id(), &key.columns);
      const auto dests = [](const google::protobuf::RepeatedField<uint32_t>& ds) {
        return ds.empty() ? std::string("-") : absl::StrJoin(ds, ",");
      };
      rows.push_back(
          {std::move(key), Text(dests(m.from_destinations())), Text(dests(m.to_destinations()))});
    }
    AppendGrid(&out, rows, {false, false, false});
  };
  section("Moved", diff.moved());
  section("Added", diff.added());
  section("Removed", diff.removed());
  return out;
}

// ---- watch

std::string FormatWatchEvent(const WatchEvent& event, OnlineFormat format) {
  if (format == OnlineFormat::kJson) {
    JsonWriter json;
    json.BeginObject().Key("version").Version(event.version);
    json.Key("kind").String(event.full ? "full" : "delta");
    if (!event.full) json.Key("base").Version(event.base);
    json.Key("keys")
        .Uint(event.keys)
        .Key("upserts")
        .Uint(event.upserts)
        .Key("removals")
        .Uint(event.removals)
        .Key("destinations")
        .Uint(event.destinations)
        .Key("built_unix_ms")
        .Int(event.built_unix_ms)
        .EndObject();
    return json.Line();
  }
  const std::string kind =
      event.full ? std::string("full") : absl::StrCat("delta from ", VersionText(event.base));
  return absl::StrFormat("%s  %s  keys %d  upserts %d  removals %d  destinations %d  built %s\n",
                         VersionText(event.version), kind, event.keys, event.upserts,
                         event.removals, event.destinations, TimeText(event.built_unix_ms));
}

}  // namespace cacheroute::client
