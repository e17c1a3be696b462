#include "harness/source_dir.h"

#ifndef DTB_SOURCE_DIR
#define DTB_SOURCE_DIR "."
#endif

namespace dtb {

const char* source_dir() { return DTB_SOURCE_DIR; }

}  // namespace dtb
