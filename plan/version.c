// version.c — the build's version and commit (version.h). The Makefile passes SR_GIT_COMMIT to this one
// object and rebuilds it when the commit changes, so nothing else recompiles for a new commit.
#include "plan/version.h"

#ifndef SR_GIT_COMMIT
#define SR_GIT_COMMIT "unknown"  // built without the Makefile (or from a tarball without git)
#endif

const char *sr_version(void) { return SR_VERSION; }

const char *sr_git_commit(void) { return SR_GIT_COMMIT; }
