# dataplane_package_test: installs the built tree into a scratch prefix, then configures, builds
# and runs dataplane/examples/gateway against it with find_package(cacheroute), as a gateway's own
# build would. Arguments: -DBUILD_DIR, -DSOURCE_DIR, -DWORK_DIR, and -DSANITIZE (the tree's
# CACHEROUTE_SANITIZE: the installed static libraries then need the same sanitizer runtime).
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
set(flags "")
if(SANITIZE)
  set(flags "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/dataplane/examples/gateway -B ${WORK_DIR}/gateway -G Ninja
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix ${flags})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/gateway)
run(${WORK_DIR}/gateway/example_gateway)
string(FIND "${last_output}" "tenant-7  -> destination 1 (planned)" planned)
string(FIND "${last_output}" "(power of two)" fallback)
if(planned EQUAL -1 OR fallback EQUAL -1)
  message(FATAL_ERROR "unexpected output of example_gateway:\n${last_output}")
endif()
message(STATUS "example_gateway:\n${last_output}")

# The gRPC pieces from the same installed tree: find_package(cacheroute COMPONENTS grpc). With no
# planner listening, every request falls back ("no_table") and the program still ends cleanly.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/dataplane/examples/gateway_grpc -B ${WORK_DIR}/gateway_grpc
    -G Ninja -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix ${flags})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/gateway_grpc)
run(${WORK_DIR}/gateway_grpc/example_gateway_grpc 127.0.0.1:1)
string(FIND "${last_output}" "tenant-7 -> engine-" routed)
string(FIND "${last_output}" "(no_table)" no_table)
if(routed EQUAL -1 OR no_table EQUAL -1)
  message(FATAL_ERROR "unexpected output of example_gateway_grpc:\n${last_output}")
endif()
message(STATUS "example_gateway_grpc:\n${last_output}")
