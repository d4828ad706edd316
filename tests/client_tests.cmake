# Tests for client/: the rates-file parser, the plan formatters, and cacheroutectl end to end.
# cacheroute::workload_gen: tests/support/json_reader.h.
cacheroute_add_test(NAME rates_csv_test SOURCES rates_csv_test.cc
                    LIBS cacheroute::client LABELS client)
cacheroute_add_test(NAME plan_output_test SOURCES plan_output_test.cc
                    LIBS cacheroute::client cacheroute::workload_gen LABELS client)
cacheroute_add_test(NAME cacheroutectl_test SOURCES cacheroutectl_test.cc
                    LIBS cacheroute::client cacheroute::workload_gen LABELS client
                    RUNS cacheroutectl)
# The online commands end to end: a real planner in the test process on a loopback port, and the
# real cacheroutectl binary run against it.
cacheroute_add_test(NAME cacheroutectl_online_test SOURCES cacheroutectl_online_test.cc
                    LIBS cacheroute::planner_service absl::strings cacheroute::workload_gen
                    LABELS client RUNS cacheroutectl)
