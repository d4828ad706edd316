// See state_store.h.
#include "planner/service/state_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cacheroute::service {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return ErrnoError("cannot open", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("cannot fsync", path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StateStore> StateStore::Open(std::string dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_dir: cannot create \"", dir, "\": ", error.message()));
  }
  return StateStore(std::move(dir));
}

absl::StatusOr<std::optional<v1::PlannerState>> StateStore::Load() const {
  const std::string path = absl::StrCat(dir_, "/", kFileName);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::nullopt;
    return ErrnoError("cannot read", path);
  }
  std::stringstream bytes;
  bytes << in.rdbuf();
  v1::PlannerState state;
  if (!state.ParseFromString(bytes.str())) {
    return absl::DataLossError(absl::StrCat("state file ", path, " is corrupt"));
  }
  if (state.format() != 1) {
    return absl::DataLossError(
        absl::StrCat("state file ", path, " has unknown format ", state.format()));
  }
  return state;
}

absl::Status StateStore::Save(const v1::PlannerState& state) const {
  const std::string path = absl::StrCat(dir_, "/", kFileName);
  const std::string tmp = absl::StrCat(path, ".tmp");
  std::string bytes;
  if (!state.SerializeToString(&bytes)) return absl::InternalError("cannot serialise the state");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return ErrnoError("cannot write", tmp);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return ErrnoError("cannot fsync", tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("cannot rename to", path);
  return FsyncPath(dir_, O_RDONLY | O_DIRECTORY);
}

}  // namespace cacheroute::service
