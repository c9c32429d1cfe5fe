// version.h — what a build of sparsering is: its version and the git commit it was built from, as
// `sparsering --version` and `sparsering-exec --version` print them.
#ifndef SR_VERSION_H
#define SR_VERSION_H

#define SR_VERSION "0.1.0"

// The version number, e.g. "0.1.0".
const char *sr_version(void);
// The commit the build came from (`git describe --always --dirty`), or "unknown" outside a git checkout.
const char *sr_git_commit(void);

#endif
