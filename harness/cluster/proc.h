/* Running a program and collecting what it says: sbatch and squeue, whose
 * answers (a job id, a refusal) kvbench reads and passes on. */
#ifndef KB_PROC_H
#define KB_PROC_H

#include "util/error.h"

typedef struct kb_proc_output {
    int status; /* exit status; 128 + N when signal N ended it */
    char *out;  /* stdout, NUL-terminated */
    char *errs; /* stderr, NUL-terminated */
} kb_proc_output;

/* Runs argv (argv[0] looked up on PATH; NULL-terminated) with stdin from
 * /dev/null and waits for it. Returns 0 with *o filled (whatever the exit
 * status), 1 when argv[0] is not on PATH, -1 with err on other failures. */
int kb_proc_run(const char *const *argv, kb_proc_output *o, kv_error *err);
void kb_proc_output_free(kb_proc_output *o);

#endif
