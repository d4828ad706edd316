// See online_commands.h. Each command parses and checks its flags first (bad input exits 2 before
// any call), then makes its calls through PlannerClient, then renders with online_output.h.
#include "client/online_commands.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "client/json_writer.h"
#include "client/online_output.h"
#include "client/planner_client.h"
#include "client/rates_csv.h"
#include "client/text_format.h"
#include "planner/key_id.h"
#include "proto/table/table_client_state.h"

namespace cacheroute::client {
namespace {

// The planner's limits (rates.proto, planner/rate_aggregator.h), checked here too so that an
// error can name the key and the file rather than an index into a report.
constexpr size_t kMaxEntriesPerReport = 100000;
constexpr size_t kMaxKeyBytes = 256;
constexpr double kMaxCount = 1e15;
constexpr double kMaxWindowSeconds = 3600;
constexpr double kDefaultWindowSeconds = 10;

int64_t NowUnixMs() { return absl::ToUnixMillis(absl::Now()); }

// The shared part of the online commands: the global options, a connection, the output format.
class OnlineCommand : public Command {
 public:
  OnlineCommand(CLI::App& parent, const GlobalOptions& options, const std::string& name,
                const std::string& description)
      : options_(options) {
    command_ = parent.add_subcommand(name, description);
    // Global options are accepted after the subcommand name too: `show --format json`.
    command_->fallthrough();
  }

  bool Selected() const override { return command_->parsed(); }

 protected:
  absl::StatusOr<std::unique_ptr<PlannerClient>> Connect() const {
    return PlannerClient::Connect(
        {.address = options_.planner, .token = options_.token, .tls_ca_file = options_.tls_ca});
  }
  absl::StatusOr<OnlineFormat> Format() const { return ParseOnlineFormat(options_.format); }

  const GlobalOptions& options_;
  CLI::App* command_ = nullptr;
};

// ---- push-rates

struct RatesFile {
  RatesCsv csv;
  bool counts = false;  // header key,count: values are counts in the window, not rates
};

// Parses a rates file whose header is `key,rate` or `key,count`. The parser knows only the
// first, so a `key,count` header is rewritten in place (same line, so line numbers hold) and the
// parser's messages are renamed to match.
absl::StatusOr<RatesFile> ParseRatesOrCounts(std::string text, absl::string_view file_name) {
  RatesFile out;
  size_t pos = absl::string_view(text).substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  while (pos < text.size()) {  // blank lines, as the parser skips them
    if (text[pos] == '\n') {
      ++pos;
    } else if (text[pos] == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n') {
      pos += 2;
    } else {
      break;
    }
  }
  constexpr absl::string_view kCountHeader = "key,count";
  const absl::string_view rest = absl::string_view(text).substr(pos);
  const size_t header_end = std::min(rest.find('\n'), rest.size());
  absl::string_view header = rest.substr(0, header_end);
  if (!header.empty() && header.back() == '\r') header.remove_suffix(1);
  if (header == kCountHeader || absl::StartsWith(header, "key,count,")) {
    text.replace(pos, kCountHeader.size(), "key,rate");
    out.counts = true;
  }
  absl::StatusOr<RatesCsv> csv = ParseRatesCsv(text);
  if (!csv.ok()) {
    std::string message(csv.status().message());
    if (out.counts) {
      message = absl::StrReplaceAll(message, {{"field 'rate'", "field 'count'"},
                                              {"(key,rate)", "(key,count)"},
                                              {"empty rate", "empty count"}});
    }
    message = absl::StrReplaceAll(
        message, {{"expected header 'key,rate'", "expected header 'key,rate' or 'key,count'"}});
    return absl::InvalidArgumentError(absl::StrCat(file_name, ": ", message));
  }
  out.csv = *std::move(csv);
  return out;
}

class PushRatesCommand final : public OnlineCommand {
 public:
  PushRatesCommand(CLI::App& app, const GlobalOptions& options)
      : OnlineCommand(app, options, "push-rates",
                      "Report per-key rates or counts to the planner, as a gateway would.") {
    command_->add_option("--gateway", gateway_, "Gateway id to report as")
        ->required()
        ->type_name("ID");
    command_
        ->add_option("--rates", rates_path_,
                     "CSV with header 'key,rate' (req/s) or 'key,count', optionally followed by "
                     "',reusable_tokens[,prompt_tokens]' per request ('-' reads stdin)")
        ->required()
        ->type_name("FILE");
    command_
        ->add_option("--window", window_,
                     "Window length in seconds, at most 3600 (default 10; required for counts)")
        ->type_name("SECONDS");
    command_
        ->add_option("--sequence", sequence_,
                     "Sequence number of the first report (default: Unix time in ms)")
        ->type_name("N");
    command_
        ->add_option("--batch-size", batch_size_,
                     "Keys per report, at most 100000 (the planner's max_keys_per_report)")
        ->type_name("N")
        ->capture_default_str();
  }

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    if (gateway_.empty()) return FlagError("--gateway", "a non-empty gateway id", gateway_);
    double window_seconds = kDefaultWindowSeconds;
    if (!window_.empty()) {
      CACHEROUTE_ASSIGN_OR_RETURN(double window, ParsePositiveFlag("--window", window_));
      if (window > kMaxWindowSeconds) {
        return FlagError("--window", "a number of seconds in (0, 3600]", window_);
      }
      window_seconds = window;
    }
    const int64_t window_ms = std::llround(window_seconds * 1000);
    if (window_ms < 1) return FlagError("--window", "at least 0.001 seconds", window_);
    std::optional<uint64_t> first_sequence;
    if (!sequence_.empty()) {
      CACHEROUTE_ASSIGN_OR_RETURN(first_sequence,
                                  ParseIntFlag<uint64_t>("--sequence", sequence_, 1));
    }
    CACHEROUTE_ASSIGN_OR_RETURN(uint64_t batch_size,
                                ParseIntFlag<uint64_t>("--batch-size", batch_size_, 1));
    if (batch_size > kMaxEntriesPerReport) {
      return FlagError("--batch-size", "an integer in [1, 100000]", batch_size_);
    }

    CACHEROUTE_ASSIGN_OR_RETURN(std::string text, ReadRatesFile(rates_path_));
    const std::string file_name = rates_path_ == "-" ? "<stdin>" : rates_path_;
    CACHEROUTE_ASSIGN_OR_RETURN(RatesFile file, ParseRatesOrCounts(std::move(text), file_name));
    if (file.counts && window_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--window: required with a key,count file (", file_name,
                       "), so the planner knows how long the counts took"));
    }

    // Counts as sent: a rate covers the window exactly as it goes on the wire (whole ms).
    const double seconds = static_cast<double>(window_ms) / 1000.0;
    const RatesCsv& csv = file.csv;
    std::vector<double> counts(csv.keys.size());
    double total_count = 0;
    for (size_t i = 0; i < csv.keys.size(); ++i) {
      if (csv.keys[i].size() > kMaxKeyBytes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: key %s is %d bytes; the planner takes keys of at most %d bytes", file_name,
            QuoteForMessage(csv.keys[i]), csv.keys[i].size(), kMaxKeyBytes));
      }
      counts[i] = file.counts ? csv.rates[i] : csv.rates[i] * seconds;
      if (!(counts[i] <= kMaxCount)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: key %s: %s requests in the window is more than the planner accepts (%s)",
            file_name, QuoteForMessage(csv.keys[i]), ShortestDouble(counts[i]),
            ShortestDouble(kMaxCount)));
      }
      total_count += counts[i];
    }

    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    const int64_t end_ms = NowUnixMs();
    const uint64_t sequence = first_sequence.value_or(static_cast<uint64_t>(end_ms));
    const size_t reports = std::max<size_t>(1, (csv.keys.size() + batch_size - 1) / batch_size);
    if (sequence > UINT64_MAX - (reports - 1)) {
      return FlagError("--sequence", absl::StrCat("room for ", reports, " consecutive numbers"),
                       sequence_);
    }

    struct Sent {
      uint64_t sequence = 0;
      size_t keys = 0;
      v1::ReportRatesResponse response;
    };
    std::vector<Sent> sent;
    for (size_t r = 0; r < reports; ++r) {
      v1::ReportRatesRequest request;
      request.set_gateway_id(gateway_);
      request.set_sequence(sequence + r);
      request.set_window_start_unix_ms(end_ms - window_ms);
      request.set_window_end_unix_ms(end_ms);
      const size_t begin = r * batch_size;
      const size_t end = std::min(csv.keys.size(), begin + batch_size);
      for (size_t i = begin; i < end; ++i) {
        v1::KeyCount* count = request.add_counts();
        count->set_key_id(KeyId(csv.keys[i]));
        count->set_count(counts[i]);
        count->set_key(csv.keys[i]);
        // Sizes per request in the file; on the wire, sums over the window's requests.
        if (!csv.tokens.empty() && csv.tokens[i].reusable >= 0) {
          const planner::KeyTokens& t = csv.tokens[i];
          count->set_reusable_tokens(t.reusable * counts[i]);
          count->set_prompt_tokens((t.prompt >= 0 ? t.prompt : t.reusable) * counts[i]);
        }
      }
      absl::StatusOr<v1::ReportRatesResponse> response = client->ReportRates(request);
      if (!response.ok()) {
        if (r == 0) return response.status();
        return absl::Status(
            response.status().code(),
            absl::StrFormat("report %d of %d (sequence %d): %s; reports 1 to %d (sequences %d to "
                            "%d) were applied",
                            r + 1, reports, sequence + r, response.status().message(), r, sequence,
                            sequence + r - 1));
      }
      sent.push_back({sequence + r, end - begin, *std::move(response)});
    }

    uint64_t accepted = 0;
    for (const Sent& s : sent) accepted += s.response.accepted_keys();
    if (format == OnlineFormat::kJson) {
      JsonWriter json;
      json.BeginObject()
          .Key("gateway_id")
          .String(gateway_)
          .Key("window_start_unix_ms")
          .Int(end_ms - window_ms)
          .Key("window_end_unix_ms")
          .Int(end_ms)
          .Key("keys")
          .Uint(csv.keys.size())
          .Key("total_count")
          .Number(total_count)
          .Key("accepted_keys")
          .Uint(accepted)
          .Key("reports")
          .BeginArray();
      for (const Sent& s : sent) {
        json.BeginObject()
            .Key("sequence")
            .Uint(s.sequence)
            .Key("keys")
            .Uint(s.keys)
            .Key("accepted_keys")
            .Uint(s.response.accepted_keys())
            .Key("duplicate")
            .Bool(s.response.duplicate())
            .EndObject();
      }
      json.EndArray().EndObject();
      return WriteStdout(json.Line());
    }
    std::string out =
        absl::StrFormat("Pushed %d keys (%s requests in a %s s window) for gateway %s to %s\n",
                        csv.keys.size(), absl::StrFormat("%.6g", total_count),
                        ShortestDouble(seconds), QuoteForMessage(gateway_), client->address());
    absl::StrAppendFormat(&out, "  accepted keys   %d\n", accepted);
    for (size_t r = 0; r < sent.size(); ++r) {
      const Sent& s = sent[r];
      absl::StrAppendFormat(&out, "  report %d/%d     sequence %d, %d keys: %s\n", r + 1,
                            sent.size(), s.sequence, s.keys,
                            s.response.duplicate()
                                ? "duplicate (already applied; nothing changed)"
                                : absl::StrCat(s.response.accepted_keys(), " accepted"));
    }
    return WriteStdout(out);
  }

 private:
  std::string gateway_;
  std::string rates_path_;
  std::string window_;
  std::string sequence_;
  std::string batch_size_ = "100000";
};

// ---- status

class StatusCommand final : public OnlineCommand {
 public:
  StatusCommand(CLI::App& app, const GlobalOptions& options)
      : OnlineCommand(app, options, "status",
                      "Show the planner's version, plan statistics, loads and gateways.") {}

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    CACHEROUTE_ASSIGN_OR_RETURN(v1::GetStatusResponse status, client->GetStatus());
    return WriteStdout(FormatStatus(status, client->address(), NowUnixMs(), format));
  }
};

// ---- show

class ShowCommand final : public OnlineCommand {
 public:
  ShowCommand(CLI::App& app, const GlobalOptions& options)
      : OnlineCommand(app, options, "show",
                      "Print a routing table (the latest, or --version) like `plan` does.") {
    command_->add_option("--version", version_, "The version to show, EPOCH.NUMBER")
        ->type_name("E.N");
    command_->add_option("--top", top_, "Table only: how many of the hottest keys to list")
        ->type_name("N")
        ->capture_default_str();
  }

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    CACHEROUTE_ASSIGN_OR_RETURN(uint64_t top, ParseIntFlag<uint64_t>("--top", top_, 0));
    v1::Version version;
    if (!version_.empty()) {
      CACHEROUTE_ASSIGN_OR_RETURN(version, ParseVersion("--version", version_));
    }
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    CACHEROUTE_ASSIGN_OR_RETURN(v1::RoutingTable table, client->GetTable(version));
    CACHEROUTE_ASSIGN_OR_RETURN(std::string text,
                                FormatRoutingTable(table, format, static_cast<size_t>(top)));
    return WriteStdout(text);
  }

 private:
  std::string version_;
  std::string top_ = "10";
};

// ---- explain

class ExplainCommand final : public OnlineCommand {
 public:
  ExplainCommand(CLI::App& app, const GlobalOptions& options)
      : OnlineCommand(app, options, "explain",
                      "Explain one key: its rate, k, rank, and where it is routed or why not.") {
    command_->add_option("KEY", key_, "The routing key (hashed with KeyId)");
    command_->add_option("--key-id", key_id_, "The key's 64-bit id instead (decimal or 0x hex)")
        ->type_name("N");
  }

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    const bool has_key = command_->count("KEY") > 0;
    const bool has_id = command_->count("--key-id") > 0;
    if (has_key == has_id) {
      return absl::InvalidArgumentError(has_key ? "explain: give KEY or --key-id N, not both"
                                                : "explain: give a KEY or --key-id N");
    }
    v1::ExplainRequest request;
    if (has_key) {
      if (key_.empty()) return FlagError("KEY", "a non-empty key", key_);
      request.set_key(key_);
    } else {
      CACHEROUTE_ASSIGN_OR_RETURN(uint64_t id, ParseKeyId(key_id_));
      request.set_key_id(id);
    }
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    CACHEROUTE_ASSIGN_OR_RETURN(v1::ExplainResponse explain, client->Explain(request));
    // Destination names come from the status when it describes the same version; the answer is
    // complete without them, so a failure here only costs the names.
    absl::StatusOr<v1::GetStatusResponse> status = client->GetStatus();
    const bool same_version = status.ok() &&
                              status->version().epoch() == explain.version().epoch() &&
                              status->version().number() == explain.version().number();
    return WriteStdout(FormatExplain(explain, same_version ? &*status : nullptr, format));
  }

 private:
  static absl::StatusOr<uint64_t> ParseKeyId(absl::string_view text) {
    absl::string_view digits = text;
    int base = 10;
    if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
      digits.remove_prefix(2);
      base = 16;
    }
    uint64_t id = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id, base);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || id == 0) {
      return FlagError("--key-id", "a non-zero 64-bit id, decimal or 0x hex", text);
    }
    return id;
  }

  std::string key_;
  std::string key_id_;
};

// ---- diff

class DiffCommand final : public OnlineCommand {
 public:
  DiffCommand(CLI::App& app, const GlobalOptions& options)
      : OnlineCommand(app, options, "diff",
                      "Compare two versions (V2 defaults to the latest): moved, added and "
                      "removed keys and the churn.") {
    command_->add_option("V1", from_, "The older version")->required()->type_name("E.N");
    command_->add_option("V2", to_, "The newer version (default: the latest)")->type_name("E.N");
    command_->add_option("--top", top_, "Table only: keys listed per kind")
        ->type_name("N")
        ->capture_default_str();
  }

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    CACHEROUTE_ASSIGN_OR_RETURN(uint64_t top, ParseIntFlag<uint64_t>("--top", top_, 0));
    v1::DiffRequest request;
    CACHEROUTE_ASSIGN_OR_RETURN(*request.mutable_from(), ParseVersion("V1", from_));
    if (!to_.empty()) {
      CACHEROUTE_ASSIGN_OR_RETURN(*request.mutable_to(), ParseVersion("V2", to_));
    }
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    CACHEROUTE_ASSIGN_OR_RETURN(v1::DiffResponse diff, client->Diff(request));
    return WriteStdout(FormatDiff(diff, format, static_cast<size_t>(top)));
  }

 private:
  std::string from_;
  std::string to_;
  std::string top_ = "20";
};

// ---- watch

class WatchCommand final : public OnlineCommand {
 public:
  WatchCommand(CLI::App& app, const GlobalOptions& options)
      : OnlineCommand(app, options, "watch",
                      "Subscribe to the table stream like a gateway and print each version.") {
    command_
        ->add_option("--gateway-id", gateway_id_,
                     "Gateway id to subscribe as (default: cacheroutectl-watch-PID)")
        ->type_name("ID");
    command_->add_option("--count", count_, "Exit after N versions (default: run until killed)")
        ->type_name("N");
  }

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    uint64_t count = 0;  // 0: no limit
    if (!count_.empty()) {
      CACHEROUTE_ASSIGN_OR_RETURN(count, ParseIntFlag<uint64_t>("--count", count_, 1));
    }
    const std::string gateway_id =
        gateway_id_.empty() ? absl::StrCat("cacheroutectl-watch-", getpid()) : gateway_id_;
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    if (client->address_count() > 1) {
      // The stream goes to the current address: first find a replica that answers.
      if (absl::Status s = client->GetStatus().status(); !s.ok()) return s;
    }

    grpc::ClientContext context;
    client->PrepareStreamContext(&context);
    std::unique_ptr<grpc::ClientReaderWriter<v1::StreamTableRequest, v1::TableUpdate>> stream =
        client->tables().StreamTable(&context);
    table::TableClientState state(gateway_id);
    uint64_t printed = 0;
    const auto stream_ended = [&]() -> absl::Status {
      const grpc::Status status = stream->Finish();
      if (status.ok() || status.error_code() == grpc::StatusCode::CANCELLED) {
        return absl::UnavailableError(absl::StrCat(
            "planner ", client->address(), " ended the table stream after ", printed, " versions"));
      }
      return client->ToStatus("StreamTable", status);
    };
    if (!stream->Write(state.OnConnect())) return stream_ended();

    // What the update being reassembled carries, summed over its chunks.
    WatchEvent pending;
    v1::TableUpdate update;
    while (count == 0 || printed < count) {
      if (!stream->Read(&update)) return stream_ended();
      if (update.chunk_index() == 0) {
        pending = WatchEvent();
        pending.full = update.has_full();
        if (update.has_delta()) pending.base = update.delta().base();
      }
      if (update.has_full()) pending.upserts += update.full().assignments_size();
      if (update.has_delta()) {
        pending.upserts += update.delta().upserts_size();
        pending.removals += update.delta().removed_key_ids_size();
      }
      absl::StatusOr<std::optional<v1::StreamTableRequest>> answer = state.OnUpdate(update);
      if (!answer.ok()) {
        PrintWarning(
            absl::StrCat("ignored an update that cannot be answered: ", answer.status().message()));
        continue;
      }
      if (!answer->has_value()) continue;  // more chunks to come
      if (!stream->Write(**answer)) return stream_ended();
      if ((*answer)->has_error()) {
        PrintWarning(absl::StrCat("rejected update ", update.nonce(),
                                  " (NACK sent): ", (*answer)->error().message()));
        continue;
      }
      const std::shared_ptr<const table::TableSnapshot> current = state.current();
      pending.version = current->version().ToProto();
      pending.keys = current->entries().size();
      pending.destinations = current->destinations().size();
      pending.built_unix_ms = current->built_unix_ms();
      if (absl::Status s = WriteStdout(FormatWatchEvent(pending, format)); !s.ok()) return s;
      ++printed;
    }
    stream->WritesDone();
    context.TryCancel();
    stream->Finish();  // cancelled by us: the status says nothing
    return absl::OkStatus();
  }

 private:
  static void PrintWarning(absl::string_view message) {
    std::fprintf(stderr, "cacheroutectl: warning: %s\n",
                 absl::StrReplaceAll(message, {{"\n", " "}}).c_str());
  }

  std::string gateway_id_;
  std::string count_;
};

// ---- replan, drain, destinations

class ReplanCommand final : public OnlineCommand {
 public:
  ReplanCommand(CLI::App& app, const GlobalOptions& options)
      : OnlineCommand(app, options, "replan", "Plan now instead of at the next control interval.") {
  }

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    CACHEROUTE_ASSIGN_OR_RETURN(v1::ReplanResponse replan, client->Replan());
    if (format == OnlineFormat::kJson) {
      JsonWriter json;
      json.BeginObject()
          .Key("version")
          .Version(replan.version())
          .Key("changed")
          .Bool(replan.changed())
          .EndObject();
      return WriteStdout(json.Line());
    }
    return WriteStdout(absl::StrCat(
        "version ", VersionText(replan.version()),
        replan.changed() ? ": new table published\n"
                         : ": unchanged (the plan came out the same; no new version)\n"));
  }
};

class DrainCommand final : public OnlineCommand {
 public:
  DrainCommand(CLI::App& app, const GlobalOptions& options, bool undrain)
      : OnlineCommand(app, options, undrain ? "undrain" : "drain",
                      undrain ? "Put a drained destination back into the plan."
                              : "Move every key off a destination (it keeps its index)."),
        undrain_(undrain) {
    command_->add_option("DEST", destination_, "The destination's name")->required();
  }

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    v1::DrainRequest request;
    request.set_destination(destination_);
    request.set_undrain(undrain_);
    CACHEROUTE_ASSIGN_OR_RETURN(v1::DrainResponse drain, client->Drain(request));
    if (format == OnlineFormat::kJson) {
      JsonWriter json;
      json.BeginObject()
          .Key("destination")
          .String(destination_)
          .Key("drained")
          .Bool(!undrain_)
          .Key("version")
          .Version(drain.version())
          .EndObject();
      return WriteStdout(json.Line());
    }
    return WriteStdout(absl::StrCat(undrain_ ? "undrained " : "drained ",
                                    QuoteForMessage(destination_), "; the table is now version ",
                                    VersionText(drain.version()), "\n"));
  }

 private:
  const bool undrain_;
  std::string destination_;
};

// ---- gate

std::string GateText(const v1::GateStatus& g) {
  std::string out = absl::StrCat("gate: ", g.state(), ", ", absl::StrFormat("%.0f", 100 * g.table_fraction()),
                                 "% of keys on the table");
  if (!g.forced_state().empty()) {
    absl::StrAppend(&out, " (forced: ", g.forced_state(),
                    g.forced_why().empty() ? "" : absl::StrCat(", ", g.forced_why()), ")");
  }
  absl::StrAppend(&out, "\n");
  if (g.verdict().empty()) return absl::StrCat(out, "no decision yet\n");
  absl::StrAppend(&out, "last decision (interval ", g.interval(), "): ", g.verdict(), "\n");
  absl::StrAppend(&out, absl::StrFormat("  %-8s %10s %12s %14s %8s\n", "arm", "samples",
                                        "ttft_q_s", "failure_rate", "kv_hit"));
  absl::StrAppend(&out, absl::StrFormat("  %-8s %10u %12.3f %14.4f %8.3f\n", "table",
                                        g.table_samples(), g.table_quantile_seconds(),
                                        g.table_failure_rate(), g.table_kv_hit()));
  absl::StrAppend(&out, absl::StrFormat("  %-8s %10u %12.3f %14.4f %8.3f\n", "control",
                                        g.control_samples(), g.control_quantile_seconds(),
                                        g.control_failure_rate(), g.control_kv_hit()));
  if (!g.why().empty()) absl::StrAppend(&out, "why: ", g.why(), "\n");
  return out;
}

std::string GateJson(const v1::GateStatus& g) {
  JsonWriter json;
  json.BeginObject()
      .Key("state").String(g.state())
      .Key("table_fraction").Number(g.table_fraction())
      .Key("forced_state").String(g.forced_state())
      .Key("forced_why").String(g.forced_why())
      .Key("interval").Uint(g.interval())
      .Key("verdict").String(g.verdict())
      .Key("why").String(g.why())
      .Key("table").BeginObject()
      .Key("samples").Uint(g.table_samples())
      .Key("ttft_quantile_seconds").Number(g.table_quantile_seconds())
      .Key("failure_rate").Number(g.table_failure_rate())
      .Key("kv_hit").Number(g.table_kv_hit())
      .EndObject()
      .Key("control").BeginObject()
      .Key("samples").Uint(g.control_samples())
      .Key("ttft_quantile_seconds").Number(g.control_quantile_seconds())
      .Key("failure_rate").Number(g.control_failure_rate())
      .Key("kv_hit").Number(g.control_kv_hit())
      .EndObject()
      .EndObject();
  return json.Line();
}

class GateCommand final : public OnlineCommand {
 public:
  GateCommand(CLI::App& app, const GlobalOptions& options)
      : OnlineCommand(app, options, "gate",
                      "Show the rollout gate's state and last decision; --force holds a state.") {
    command_->add_option("--force", force_, "Hold the gate in STATE: shadow, canary, enabled, "
                                            "rolled_back")
        ->type_name("STATE");
    command_->add_flag("--release", release_, "Release a forced state");
    command_->add_option("--why", why_, "The reason, logged and shown with a forced state");
  }

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    if (release_ && !force_.empty()) {
      return absl::InvalidArgumentError("--force and --release: give one of them");
    }
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    v1::GateStatus gate;
    if (release_ || !force_.empty()) {
      v1::ForceGateRequest request;
      request.set_state(force_);
      request.set_why(why_);
      CACHEROUTE_ASSIGN_OR_RETURN(gate, client->ForceGate(request));
    } else {
      CACHEROUTE_ASSIGN_OR_RETURN(v1::GetStatusResponse status, client->GetStatus());
      if (!status.has_gate()) {
        return absl::FailedPreconditionError(
            "the planner runs no rollout gate (planner.yaml: gate.enabled is false)");
      }
      gate = status.gate();
    }
    return WriteStdout(format == OnlineFormat::kJson ? GateJson(gate) : GateText(gate));
  }

 private:
  std::string force_;
  bool release_ = false;
  std::string why_;
};

class DestinationsCommand final : public OnlineCommand {
 public:
  DestinationsCommand(CLI::App& app, const GlobalOptions& options)
      : OnlineCommand(app, options, "destinations",
                      "List the destinations, or set the whole membership.") {
    command_->require_subcommand(1);
    set_ = command_->add_subcommand("set", "Replace the membership with NAME... (replans)");
    set_->fallthrough();
    set_->add_option("NAME", names_, "Destination names, in index order")
        ->required()
        ->type_name("NAME...");
    list_ = command_->add_subcommand("list", "List destinations with drain state and load");
    list_->fallthrough();
  }

  absl::Status Run() override {
    CACHEROUTE_ASSIGN_OR_RETURN(OnlineFormat format, Format());
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<PlannerClient> client, Connect());
    if (list_->parsed()) {
      CACHEROUTE_ASSIGN_OR_RETURN(v1::GetStatusResponse status, client->GetStatus());
      return WriteStdout(FormatDestinations(status, format));
    }
    v1::SetDestinationsRequest request;
    for (const std::string& name : names_) request.add_destinations(name);
    CACHEROUTE_ASSIGN_OR_RETURN(v1::SetDestinationsResponse set, client->SetDestinations(request));
    if (format == OnlineFormat::kJson) {
      JsonWriter json;
      json.BeginObject().Key("destinations").BeginArray();
      for (const std::string& name : names_) json.String(name);
      json.EndArray().Key("version").Version(set.version()).EndObject();
      return WriteStdout(json.Line());
    }
    std::vector<std::string> shown;
    for (const std::string& name : names_) shown.push_back(QuoteForMessage(name));
    return WriteStdout(absl::StrCat("destinations set to ", names_.size(), ": ",
                                    absl::StrJoin(shown, ", "), "; the table is now version ",
                                    VersionText(set.version()), "\n"));
  }

 private:
  CLI::App* set_ = nullptr;
  CLI::App* list_ = nullptr;
  std::vector<std::string> names_;
};

}  // namespace

void AddGlobalOptions(CLI::App& app, GlobalOptions* options) {
  app.add_option("--planner", options->planner,
                 "Planner address HOST:PORT, or several replicas' comma-separated, tried in turn "
                 "(env CACHEROUTE_PLANNER)")
      ->envname("CACHEROUTE_PLANNER")
      ->type_name("HOST:PORT[,…]")
      ->capture_default_str();
  app.add_option("--token", options->token, "Bearer token for the planner (env CACHEROUTE_TOKEN)")
      ->envname("CACHEROUTE_TOKEN")
      ->type_name("T");
  app.add_option("--tls-ca", options->tls_ca, "Use TLS, trusting this PEM root CA")
      ->type_name("FILE");
  app.add_option("--format", options->format, "Online commands: table or json")
      ->type_name("FORMAT")
      ->capture_default_str();
}

void AddOnlineCommands(CLI::App& app, const GlobalOptions& options,
                       std::vector<std::unique_ptr<Command>>* commands) {
  commands->push_back(std::make_unique<PushRatesCommand>(app, options));
  commands->push_back(std::make_unique<StatusCommand>(app, options));
  commands->push_back(std::make_unique<ShowCommand>(app, options));
  commands->push_back(std::make_unique<ExplainCommand>(app, options));
  commands->push_back(std::make_unique<DiffCommand>(app, options));
  commands->push_back(std::make_unique<WatchCommand>(app, options));
  commands->push_back(std::make_unique<ReplanCommand>(app, options));
  commands->push_back(std::make_unique<DrainCommand>(app, options, /*undrain=*/false));
  commands->push_back(std::make_unique<DrainCommand>(app, options, /*undrain=*/true));
  commands->push_back(std::make_unique<DestinationsCommand>(app, options));
  commands->push_back(std::make_unique<GateCommand>(app, options));
}

}  // namespace cacheroute::client
