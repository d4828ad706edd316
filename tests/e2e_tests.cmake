# End-to-end tests of the engine emulator and the replay tool (issue 6): real HTTP on loopback
# ports chosen by the kernel, emulators in-process, cacheroute-replay as a real process.
find_package(PkgConfig REQUIRED)
pkg_check_modules(E2E_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

cacheroute_add_test(NAME engine_emu_test SOURCES engine_emu_test.cc
                    LIBS cacheroute::engine_emu cacheroute::workload_gen PkgConfig::E2E_HTTPLIB)
cacheroute_add_test(NAME replay_test SOURCES replay_test.cc
                    LIBS cacheroute::engine_emu cacheroute::replay cacheroute::workload_gen
                         PkgConfig::E2E_HTTPLIB
                    RUNS cacheroute-replay)
cacheroute_add_test(NAME replay_compare_test SOURCES replay_compare_test.cc LIBS cacheroute::replay
                    RUNS cacheroute-replay-compare)
