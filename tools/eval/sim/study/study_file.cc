// Study files; see study_file.h.
#include "tools/eval/sim/study/study_file.h"

#include <cstdint>
#include <limits>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/config_file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "tools/eval/sim/study/builtin_studies.h"
#include "tools/eval/sim/study/validation.h"

namespace cacheroute::sim::study {
namespace {

using namespace base::yaml;  // NOLINT: the shared checks, parsers and field makers

// One value of type T: an unquoted number (any: ValidateStudy checks the ranges), an unsigned
// integer within T, true or false, any string, or a sequence of those.
template <typename T>
absl::StatusOr<T> Read(absl::string_view name, const YAML::Node& node) {
  if constexpr (std::is_same_v<T, bool>) {
    return YamlBool(name, node);
  } else if constexpr (std::is_same_v<T, double>) {
    CACHEROUTE_ASSIGN_OR_RETURN(std::string text, YamlPlainScalar(name, node, "a number"));
    return ParseNumber(name, text);
  } else if constexpr (std::is_unsigned_v<T>) {
    CACHEROUTE_ASSIGN_OR_RETURN(uint64_t value,
                                YamlInteger(name, node, 0, std::numeric_limits<T>::max()));
    return static_cast<T>(value);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return YamlString(name, node);
  } else {
    if (!node.IsSequence()) {
      return Invalid(name,
                     absl::StrCat("expected a list such as [1, 2], got ", DescribeNode(node)));
    }
    T values;
    for (size_t i = 0; i < node.size(); ++i) {
      CACHEROUTE_ASSIGN_OR_RETURN(
          typename T::value_type value,
          Read<typename T::value_type>(absl::StrCat(name, "[", i, "]"), node[i]));
      values.push_back(std::move(value));
    }
    return values;
  }
}

// The key `key`, read into config.*member.
template <typename Config, typename T>
Field<Config> F(absl::string_view key, T Config::*member) {
  return ParsedField(key, member, Read<T>);
}

// The key `key`, read into (config.*part).*member: a key of a flat mapping that the config keeps
// in a part of its own (fleet.decode_stall is FleetKnobs::dispatch.decode_stall).
template <typename Config, typename Part, typename T>
Field<Config> F(absl::string_view key, Part Config::*part, T Part::*member) {
  return {key,
          [part, member](absl::string_view name, const YAML::Node& node,
                         Config& config) -> absl::Status {
            CACHEROUTE_ASSIGN_OR_RETURN((config.*part).*member, Read<T>(name, node));
            return absl::OkStatus();
          }};
}

// The key `key`, read into a field of the baselines' parameters (FleetKnobs::parameters):
// fleet.dynamo_overlap_score_weight is parameters.dynamo.overlap_score_weight.
template <typename Options, typename T>
Field<FleetKnobs> ParameterField(absl::string_view key,
                                 Options dataplane::PolicyParameters::*options,
                                 T Options::*member) {
  return {key,
          [options, member](absl::string_view name, const YAML::Node& node,
                            FleetKnobs& knobs) -> absl::Status {
            CACHEROUTE_ASSIGN_OR_RETURN((knobs.parameters.*options).*member, Read<T>(name, node));
            return absl::OkStatus();
          }};
}

// A section of the file: a mapping of `fields`, applied to config.*part with keys named
// "<section>.<key>"; null (every key commented out) changes nothing.
template <typename Part>
Field<StudyConfig> Section(absl::string_view key, Part StudyConfig::*part,
                           const std::vector<Field<Part>>& (*fields)()) {
  return {key,
          [part, fields](absl::string_view name, const YAML::Node& node,
                         StudyConfig& config) -> absl::Status {
            if (node.IsNull()) return absl::OkStatus();
            if (!node.IsMap()) {
              return Invalid(name, absl::StrCat("expected a mapping, got ", DescribeNode(node)));
            }
            return ApplyMapping(absl::StrCat(name, "."), node, fields(), config.*part).status();
          }};
}

absl::StatusOr<workload::ArrivalProcess> ReadArrival(absl::string_view name,
                                                     const YAML::Node& node) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::string process, YamlString(name, node));
  if (process == "poisson") return workload::ArrivalProcess::kPoisson;
  if (process == "gamma") return workload::ArrivalProcess::kGamma;
  return Invalid(name, absl::StrCat("must be poisson or gamma, got ", Quote(process)));
}

const std::vector<Field<workload::WorkloadProfile>>& WorkloadFields() {
  using W = workload::WorkloadProfile;
  static const auto* const fields = new std::vector<Field<W>>{
      F("keys", &W::keys),
      F("rate_sigma", &W::rate_sigma),
      F("max_key_share", &W::max_key_share),
      F("top_k", &W::top_k),
      F("warmup_s", &W::warmup_s),
      F("multi_turn_share", &W::multi_turn_share),
      F("mean_requests_per_thread", &W::mean_requests_per_thread),
      F("follow_up_probability", &W::follow_up_probability),
      F("template_tokens", &W::template_tokens),
      F("context_tokens", &W::context_tokens),
      F("context_sigma", &W::context_sigma),
      F("context_min_tokens", &W::context_min_tokens),
      F("context_max_tokens", &W::context_max_tokens),
      F("few_shot_tokens", &W::few_shot_tokens),
      F("few_shot_pool", &W::few_shot_pool),
      F("few_shot_break_rate", &W::few_shot_break_rate),
      F("mean_turn_tokens", &W::mean_turn_tokens),
      F("mean_output_tokens", &W::mean_output_tokens),
      F("length_sigma", &W::length_sigma),
      F("arrival_cv", &W::arrivals, &workload::ArrivalOptions::cv),
      {"arrival",
       [](absl::string_view name, const YAML::Node& node, W& w) -> absl::Status {
         CACHEROUTE_ASSIGN_OR_RETURN(w.arrivals.process, ReadArrival(name, node));
         return absl::OkStatus();
       }},
  };
  return *fields;
}

const std::vector<Field<WhaleOptions>>& WhaleFields() {
  static const auto* const fields = new std::vector<Field<WhaleOptions>>{
      F("count", &WhaleOptions::count),
      F("share", &WhaleOptions::share),
  };
  return *fields;
}

const std::vector<Field<DriftOptions>>& DriftFields() {
  static const auto* const fields = new std::vector<Field<DriftOptions>>{
      F("enabled", &DriftOptions::enabled),
      F("intervals", &DriftOptions::intervals),
      F("sigma", &DriftOptions::sigma),
  };
  return *fields;
}

const std::vector<Field<TraceOptions>>& TraceFields() {
  static const auto* const fields = new std::vector<Field<TraceOptions>>{
      F("enabled", &TraceOptions::enabled),
      F("path", &TraceOptions::path),
      F("key_blocks", &TraceOptions::key_blocks),
  };
  return *fields;
}

const std::vector<Field<FleetKnobs>>& FleetFields() {
  using K = FleetKnobs;
  using D = dataplane::DispatchOptions;
  static const auto* const fields = [] {
    auto* f = new std::vector<Field<K>>{
        F("control_interval_s", &K::control_interval_s),
        F("rate_smoothing_s", &K::rate_smoothing_s),
        F("q_cap", &K::q_cap),
        F("slots_per_destination", &K::slots_per_destination),
        F("warmup_s", &K::warmup_s),
        F("timeout_s", &K::timeout_s),
        F("queue_cap", &K::queue_cap),
        F("max_plans", &K::max_plans),
        F("stickiness", &K::stickiness),
        F("kv_blocks", &K::kv_blocks),
        F("kv_event_delay_s", &K::kv_event_delay_s),
        F("kv_budget_share", &K::kv_budget_share),
        F("all_candidates_up_to", &K::dispatch, &D::all_candidates_up_to),
        F("prefix_memory_log2", &K::dispatch, &D::prefix_memory_log2),
        F("measure_turnover", &K::measure_turnover),
        F("plan_follows_cache", &K::plan_follows_cache),
        F("share", &K::share),
        F("share_work", &K::share_work),
        F("share_interval_s", &K::share_interval_s),
        F("share_delay_s", &K::share_delay_s),
        F("share_loss", &K::share_loss),
        // Dynamo's two open settings, to show how the defaults were chosen (docs/dispatch.md).
        ParameterField("dynamo_overlap_score_weight", &dataplane::PolicyParameters::dynamo,
                       &dataplane::DynamoKvOptions::overlap_score_weight),
        ParameterField("dynamo_temperature", &dataplane::PolicyParameters::dynamo,
                       &dataplane::DynamoKvOptions::temperature),
    };
    // The dispatch's cost weights, each spelled as the dataplane names it (fleet.decode_stall, …).
    for (const dataplane::DispatchWeight& w : dataplane::kDispatchWeights) {
      f->push_back(F(absl::string_view(w.name.data(), w.name.size()), &K::dispatch, w.member));
    }
    return f;
  }();
  return *fields;
}

const std::vector<Field<StudyConfig>>& StudyFields() {
  using S = StudyConfig;
  static const auto* const fields = new std::vector<Field<S>>{
      // Applied first, before any other key (ParseStudy).
      {"base", [](absl::string_view, const YAML::Node&, S&) { return absl::OkStatus(); }},
      F("name", &S::name),
      F("description", &S::description),
      F("profile", &S::profile),
      F("destinations", &S::destinations),
      F("policies", &S::policies),
      F("gateway_counts", &S::gateway_counts),
      F("loads", &S::loads),
      F("seeds", &S::seeds),
      F("duration_s", &S::duration_s),
      F("common_load_qps", &S::common_load_qps),
      F("primary_slo_s", &S::primary_slo_s),
      Section("workload", &S::workload, WorkloadFields),
      Section("whales", &S::whales, WhaleFields),
      Section("drift", &S::drift, DriftFields),
      {"trace",
       [](absl::string_view name, const YAML::Node& node, S& config) -> absl::Status {
         if (node.IsMap()) config.trace.enabled = true;  // trace.enabled may still say otherwise
         return Section("trace", &S::trace, TraceFields).apply(name, node, config);
       }},
      {"fleet",
       [](absl::string_view name, const YAML::Node& node, S& config) -> absl::Status {
         if (!node.IsMap() || !node["gateways"]) {
           return Section("fleet", &S::fleet, FleetFields).apply(name, node, config);
         }
         // fleet.gateways: N, from before gateway_counts, means gateway_counts: [N].
         CACHEROUTE_ASSIGN_OR_RETURN(uint32_t gateways,
                                     Read<uint32_t>("fleet.gateways", node["gateways"]));
         config.gateway_counts = {gateways};
         YAML::Node rest = YAML::Clone(node);
         rest.remove("gateways");
         return Section("fleet", &S::fleet, FleetFields).apply(name, rest, config);
       }},
  };
  return *fields;
}

// The study in `text`, not yet validated. Throws yaml-cpp's exceptions (CatchingYaml).
absl::StatusOr<StudyConfig> ParseStudy(absl::string_view text) {
  const YamlDocuments documents = LoadDocuments(std::string(text));
  if (documents.count > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected one YAML document, got ", documents.count, " (separated by ---)"));
  }
  const YAML::Node& root = documents.first;
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the document must be a mapping of keys (e.g. \"base: primary\"), got ",
                     DescribeNode(root)));
  }
  if (const YAML::Node fleet = root["fleet"];
      fleet && fleet.IsMap() && fleet["gateways"] && root["gateway_counts"]) {
    return Invalid("fleet.gateways",
                   absl::StrCat("give it or gateway_counts, not both (fleet.gateways: N means "
                                "gateway_counts: [N]), got ",
                                DescribeNode(fleet["gateways"]), " beside gateway_counts"));
  }
  StudyConfig config;
  if (const YAML::Node base = root["base"]) {
    CACHEROUTE_ASSIGN_OR_RETURN(std::string name, YamlString("base", base));
    absl::StatusOr<StudyConfig> found = FindStudy(name);
    if (!found.ok()) {
      return Invalid("base", absl::StrCat("must be one of ", absl::StrJoin(StudyNames(), ", "),
                                          ", got ", Quote(name)));
    }
    config = *std::move(found);
  } else {
    config.workload = workload::PaperPrimaryProfile();
  }
  if (absl::Status s = ApplyMapping("", root, StudyFields(), config).status(); !s.ok()) return s;
  return config;
}

}  // namespace

absl::StatusOr<StudyConfig> ParseStudyYaml(absl::string_view text, absl::string_view source) {
  absl::StatusOr<StudyConfig> config = CatchingYaml([&] { return ParseStudy(text); });
  if (config.ok()) {
    if (absl::Status s = ValidateStudy(*config, TracePath::kMayComeLater); !s.ok()) config = s;
  }
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(source, ": ", config.status().message()));
  }
  return config;
}

absl::StatusOr<StudyConfig> LoadStudyFile(const std::string& path) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::string text, base::ReadConfigFile("--config", path));
  return ParseStudyYaml(text, path);
}

}  // namespace cacheroute::sim::study
