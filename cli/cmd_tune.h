// cmd_tune.h — what `sparsering tune` shares with `sparsering bench-tune`: MPI set-up, the exchange the
// tuner's search uses to split its points over ranks, and the progress bar.
#ifndef SR_CMD_TUNE_H
#define SR_CMD_TUNE_H

#include "sim/tune.h"

// Start MPI when launched by mpirun (Open MPI's or PMIx's environment), else run as one process.
// Fills x with this process's rank and the world size and the MPI all-gather.
void tune_mpi_start(int *argc, char ***argv, tune_exchange *x);
// Finish MPI when tune_mpi_start started it.
void tune_mpi_finish(void);
// The same verdict on every rank: the largest exit status of any rank (0 when MPI is not running).
int tune_mpi_status(int status);
// On rank 0, when stderr is a terminal, draw the search's progress there (points decided, simulated,
// pruned, the best step so far, elapsed time, ETA).
void tune_progress_on_terminal(tune_options *o, const tune_space *sp, int rank);

#endif
