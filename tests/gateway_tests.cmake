# Tests for cacheroute-gateway (tools/gateway/): config loading, and the proxy end to end over real
# HTTP (upstreams are httplib servers on loopback ports, the planner the real one in-process).
cacheroute_add_test(NAME gateway_config_test SOURCES gateway_config_test.cc
                    LIBS cacheroute::gateway RUNS cacheroute-gateway SOURCE_DIR)
cacheroute_add_test(NAME gateway_openai_fields_test SOURCES gateway_openai_fields_test.cc
                    LIBS cacheroute::gateway)
cacheroute_add_test(NAME gateway_prometheus_text_test SOURCES gateway_prometheus_text_test.cc
                    LIBS cacheroute::gateway)
cacheroute_add_test(NAME gateway_test SOURCES gateway_test.cc
                    LIBS cacheroute::gateway cacheroute::planner_service
                    RUNS cacheroute-gateway)
# Membership sources: the upstreams file and DNS (c-ares against a test DNS server on loopback).
cacheroute_add_test(NAME gateway_membership_test SOURCES gateway_membership_test.cc
                    LIBS cacheroute::gateway)
