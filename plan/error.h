// error.h — how every library function in sparsering reports failure.
//
// Library code never prints and never exits: it fills an sr_error and returns its code.
// Only a main() decides to print the message and exit with the code. Input errors (a bad file,
// an impossible cluster, an unknown name) use SR_EINPUT, which main turns into exit status 2.
#ifndef SR_ERROR_H
#define SR_ERROR_H

enum { SR_OK = 0, SR_EINTERNAL = 1, SR_EINPUT = 2 };

typedef struct {
  int code;        // SR_OK, SR_EINPUT (bad input: exit 2) or SR_EINTERNAL (system, out of memory)
  char msg[1024];  // "FILE: FIELD: reason" for input errors
  // The file and the field sr_input_error was given ("" when none), kept as they were when callers later
  // put context in front of msg, so other languages (api/) can report them apart from the text.
  char file[512];
  char field[128];
} sr_error;

// Record an input error naming the file and the field (either may be NULL; both are kept in e->file and
// e->field too); returns SR_EINPUT.
int sr_input_error(sr_error *e, const char *file, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Record a system/internal error (errno text appended when errno_value != 0); returns SR_EINTERNAL.
int sr_internal_error(sr_error *e, int errno_value, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Clear an error to SR_OK.
void sr_error_clear(sr_error *e);
// Print "sparsering: <msg>" to stderr; returns the exit status to use (2 for input errors, 1 else).
int sr_error_report(const sr_error *e, const char *prog);

#endif
