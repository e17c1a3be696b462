// Where the source tree is: the named configs (harness/configs), claims.json and the git commit
// a report records are read from there.
#pragma once

namespace dtb {

/// The source tree's absolute path as CMake configured it (no trailing slash). Compiled into
/// harness/source_dir.cc alone, so that every other file compiles to the same command in any
/// checkout and the regression gate's baseline build (build-gate/<commit>) takes it from ccache.
const char* source_dir();

}  // namespace dtb
