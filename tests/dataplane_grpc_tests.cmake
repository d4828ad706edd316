# Tests for dataplane_grpc.
# The table subscriber and the rate reporter against the real planner on a loopback port. Not run
# under ThreadSanitizer: Debian's gRPC is not instrumented (see planner_server_test).
cacheroute_add_test(NAME dataplane_table_subscriber_test SOURCES dataplane_table_subscriber_test.cc
                    LIBS cacheroute::dataplane_grpc cacheroute::planner_service)
target_include_directories(dataplane_table_subscriber_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
cacheroute_add_test(NAME dataplane_rate_reporter_test SOURCES dataplane_rate_reporter_test.cc
                    LIBS cacheroute::dataplane_grpc cacheroute::planner_service)
target_include_directories(dataplane_rate_reporter_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
cacheroute_add_test(NAME dataplane_planner_channels_test SOURCES dataplane_planner_channels_test.cc
                    LIBS cacheroute::dataplane_grpc cacheroute::planner_service)
target_include_directories(dataplane_planner_channels_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
