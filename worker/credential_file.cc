#include "worker/credential_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace llamafleet::worker {

std::string CredentialPath(const std::string& data_dir) {
  return absl::StrCat(data_dir, "/worker-credential");
}

std::string LoadCredential(const std::string& data_dir, const std::string& name) {
  std::ifstream in(CredentialPath(data_dir));
  std::string saved_for, credential;
  if (!std::getline(in, saved_for) || !std::getline(in, credential)) return "";
  return saved_for == name ? credential : "";
}

absl::Status SaveCredential(const std::string& data_dir, const std::string& name,
                            const std::string& credential) {
  const std::string path = CredentialPath(data_dir);
  const std::string tmp = path + ".tmp";
  // Mode 0600 from the start.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("cannot write ", tmp));
  const std::string content = absl::StrCat(name, "\n", credential, "\n");
  const bool ok =
      ::fchmod(fd, 0600) == 0 &&
      ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
      ::fsync(fd) == 0;
  if (::close(fd) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cannot save the worker credential to ", path));
  }
  return absl::OkStatus();
}

}  // namespace llamafleet::worker
