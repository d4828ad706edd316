# cacheroute_planner_config: PlannerConfig loading (YAML file, then flags) for cacheroute-planner.
# Included from planner/service/CMakeLists.txt; paths are relative to this file.
find_package(yaml-cpp CONFIG REQUIRED)

# cacheroute::planner: GateOptions (planner/gate.h).
cacheroute_library(cacheroute_planner_config
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/config.cc ${CMAKE_CURRENT_LIST_DIR}/yaml_fields.cc
  PUBLIC cacheroute::planner absl::status absl::statusor absl::strings absl::time yaml-cpp
  PRIVATE CLI11::CLI11 absl::str_format)
