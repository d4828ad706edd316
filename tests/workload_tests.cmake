# The semi-synthetic workload generator and the Mooncake trace reader (issue 5).
cacheroute_add_test(NAME workload_gen_test SOURCES workload_gen_test.cc
                    LIBS cacheroute::workload_gen absl::flat_hash_map OPTIMIZED)
cacheroute_add_test(NAME mooncake_trace_test SOURCES mooncake_trace_test.cc
                    LIBS cacheroute::workload_gen)
# The real cacheroute-workload binary.
cacheroute_add_test(NAME workload_cli_test SOURCES workload_cli_test.cc LIBS cacheroute::workload_gen
                    RUNS cacheroute-workload)
