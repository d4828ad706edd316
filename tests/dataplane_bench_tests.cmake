# Tests for dataplane_bench: a smoke test that runs cacheroute-dataplane-bench on a small table
# and checks that its --json output has every field. It never checks the figures themselves.
# cacheroute::workload_gen: tests/support/json_reader.h.
cacheroute_add_test(NAME dataplane_bench_test SOURCES dataplane_bench_test.cc
                    LIBS Threads::Threads cacheroute::workload_gen
                    RUNS cacheroute-dataplane-bench)
