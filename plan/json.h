// json.h — reading JSON input files with errors that name the file, the field and the reason.
//
// Wraps cJSON: parse a file (reporting the line of a syntax error), fetch typed fields with range
// checks, and report fields a reader does not know (typos in cluster files are common).
#ifndef SR_JSON_H
#define SR_JSON_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "plan/error.h"

// Parse a JSON file; on a syntax error the message gives the file and line. Caller frees *out with cJSON_Delete.
int json_load_file(const char *path, cJSON **out, sr_error *e);
// Parse JSON text (name is used in messages). A key given twice in one object is an input error: JSON
// readers disagree on which one counts (cJSON the first, Python the last), so neither is guessed.
int json_parse_text(const char *text, const char *name, cJSON **out, sr_error *e);
// The input error of json_parse_text for a key given twice in one object of root (for headers parsed elsewhere).
int json_check_duplicates(const cJSON *root, const char *file, sr_error *e);

// Required or optional number fields of an object. `ctx` prefixes the field name ("gpu" -> "gpu.peak_tflops").
// Optional getters leave *out untouched when the field is absent or null; present-but-wrong-type is an error.
int json_get_num(const cJSON *obj, const char *key, int required, double lo, double hi, double *out,
                 const char *file, const char *ctx, sr_error *e);
int json_get_int(const cJSON *obj, const char *key, int required, int64_t lo, int64_t hi, int64_t *out,
                 const char *file, const char *ctx, sr_error *e);
int json_get_bool(const cJSON *obj, const char *key, int required, int *out, const char *file, const char *ctx,
                  sr_error *e);
int json_get_str(const cJSON *obj, const char *key, int required, char *out, size_t size, const char *file,
                 const char *ctx, sr_error *e);
// Required object field (returns SR_EINPUT when absent or not an object).
int json_get_obj(const cJSON *obj, const char *key, const cJSON **out, const char *file, const char *ctx,
                 sr_error *e);

// Reject any member of obj whose name is not in the NULL-terminated list `known`.
int json_check_known(const cJSON *obj, const char *const *known, const char *file, const char *ctx, sr_error *e);

// Add number v to obj under key, printed with the fewest digits (15 to 17) that read back as exactly v: cJSON's own
// printing stops at 15 digits when they come within a relative DBL_EPSILON, which can change a calibrated figure's last
// bit. Non-finite v is added as cJSON adds it (null). Returns the item, or NULL when memory runs out.
cJSON *json_add_number_exact(cJSON *obj, const char *key, double v);

// Serialise with a stable layout (2-space indent, fields in insertion order, trailing newline).
// Returns a malloc'd string or NULL when memory runs out.
char *json_print_stable(const cJSON *root);

#endif
