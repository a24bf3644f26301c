// The identity of this build, for the replay reports: the project version and the git revision
// CMake found when it configured the build (tools/CMakeLists.txt).
#pragma once

namespace mocker::tools {

/// The project version ("0.1.0").
const char* buildVersion();
/// `git describe --always --dirty` of the sources at configure time, or "unknown" when they
/// were not a git checkout (a release tarball) or git was missing.
const char* buildGitRevision();

}  // namespace mocker::tools
