# Tests for cacheroute-gateway (tools/gateway/): config loading, and the proxy end to end over real
# HTTP (upstreams are httplib servers on loopback ports, the planner the real one in-process).
cacheroute_add_test(NAME gateway_config_test SOURCES gateway_config_test.cc
                    LIBS cacheroute::gateway)
target_compile_definitions(gateway_config_test PRIVATE
                           CACHEROUTE_GATEWAY_PATH="$<TARGET_FILE:cacheroute-gateway>"
                           CACHEROUTE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(gateway_config_test cacheroute-gateway)
cacheroute_add_test(NAME gateway_openai_fields_test SOURCES gateway_openai_fields_test.cc
                    LIBS cacheroute::gateway)
cacheroute_add_test(NAME gateway_prometheus_text_test SOURCES gateway_prometheus_text_test.cc
                    LIBS cacheroute::gateway)
cacheroute_add_test(NAME gateway_test SOURCES gateway_test.cc
                    LIBS cacheroute::gateway cacheroute::planner_service)
target_include_directories(gateway_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(gateway_test PRIVATE
                           CACHEROUTE_GATEWAY_PATH="$<TARGET_FILE:cacheroute-gateway>")
add_dependencies(gateway_test cacheroute-gateway)
# Membership sources: the upstreams file and DNS (c-ares against a test DNS server on loopback).
cacheroute_add_test(NAME gateway_membership_test SOURCES gateway_membership_test.cc
                    LIBS cacheroute::gateway)
target_include_directories(gateway_membership_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
