# Tests for dataplane_grpc.
# The table subscriber, the rate reporter and the failover between planner replicas against real
# planners on loopback ports. The subscriber's and the channels' tests also run under
# ThreadSanitizer (the subscriber's stream thread against the Router's readers and the test's
# thread), with tsan-grpc.supp for what TSan cannot see inside Debian's uninstrumented gRPC.
cacheroute_add_test(NAME dataplane_table_subscriber_test SOURCES dataplane_table_subscriber_test.cc
                    LIBS cacheroute::dataplane_grpc cacheroute::planner_service
                    LABELS concurrency)
cacheroute_add_test(NAME dataplane_rate_reporter_test SOURCES dataplane_rate_reporter_test.cc
                    LIBS cacheroute::dataplane_grpc cacheroute::planner_service)
cacheroute_add_test(NAME dataplane_planner_channels_test SOURCES dataplane_planner_channels_test.cc
                    LIBS cacheroute::dataplane_grpc cacheroute::planner_service
                    LABELS concurrency)
if(CACHEROUTE_SANITIZE MATCHES "thread")
  set_tests_properties(dataplane_table_subscriber_test dataplane_planner_channels_test PROPERTIES
    ENVIRONMENT "TSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tsan-grpc.supp")
endif()
