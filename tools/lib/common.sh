# Shared by tools/demo, tools/test and .ci/run: install the Debian packages the build needs when
# they are missing, and configure + build a tree. Sourced, not run.

CACHEROUTE_PACKAGES=(
  cmake ninja-build g++
  libabsl-dev catch2 libcli11-dev libyaml-cpp-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcpp-httplib-dev pkg-config openssl python3
  libboost1.81-dev nlohmann-json3-dev libsimdjson-dev libssl-dev
  libc-ares-dev
  # etcd for planner HA (planner/coord): the server the tests start, etcdctl, and the .proto
  # files of etcd's v3 API (with the gogoproto and google/api files they import) to generate from.
  etcd-server etcd-client golang-etcd-server-dev golang-github-gogo-protobuf-dev
  golang-github-grpc-ecosystem-grpc-gateway-dev
)

cacheroute_ensure_packages() {
  local missing=()
  local p
  for p in "${CACHEROUTE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "cacheroute: installing missing Debian packages: ${missing[*]}" >&2
  local sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
}

# cacheroute_build DIR [cmake args...]: configure (once) and build DIR with Ninja, two jobs.
cacheroute_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  fi
  cmake --build "$dir" -j2
}

# cacheroute_configure_fuzz DIR [cmake args...]: configure DIR (once) as the fuzz build, with
# clang-14 and CACHEROUTE_FUZZ: every library with ASan + UBSan and libFuzzer's coverage, at -O1
# without NDEBUG so assertions stay on, and the test drivers at -O0 (CACHEROUTE_TEST_OPTIMIZE).
# tests/fuzz/run and .ci/run's sanitizer tree use it.
cacheroute_configure_fuzz() {
  local dir=$1
  shift
  [ -f "$dir/build.ninja" ] && return 0
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja -DCACHEROUTE_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" \
    -DCACHEROUTE_TEST_OPTIMIZE=-O0 "$@" >/dev/null
}
