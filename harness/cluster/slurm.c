#include "cluster/slurm.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/proc.h"
#include "util/file.h"

char *kb_slurm_path(const char *run_dir, const char *name)
{
    char *dir = kv_path_join(run_dir, "slurm");
    char *path = dir ? kv_path_join(dir, name) : NULL;
    free(dir);
    return path;
}

/* s as one shell word: as it is when it has nothing the shell reads,
 * otherwise in single quotes. */
static void put_word(FILE *f, const char *s)
{
    bool plain = *s != '\0';
    for (const char *p = s; *p; p++)
        plain &= isalnum((unsigned char)*p) || strchr("_./=:,+-@%", *p) != NULL;
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = s; *p; p++)
        fputs(*p == '\'' ? "'\\''" : (char[]){*p, '\0'}, f);
    fputc('\'', f);
}

/* An #SBATCH option with a path value. sbatch reads these lines itself (no
 * shell), and takes a double-quoted value whole. */
static void put_sbatch_path(FILE *f, const char *option, const char *dir, const char *name)
{
    bool quote = strpbrk(dir, " \t\"") != NULL;
    fprintf(f, "#SBATCH --%s=%s%s%s%s\n", option, quote ? "\"" : "", dir, name, quote ? "\"" : "");
}

/* A script as it is written: its text grows in a memstream. */
typedef struct script {
    FILE *f;
    char *text; /* set by fclose */
    size_t len;
} script;

/* Starts a script with its header: what it does, its job name, its log
 * file under the run folder (absolute, so that logs land there whatever
 * folder sbatch was called from), append mode, the working folder. */
static bool script_begin(script *s, const kb_slurm_run *r, const char *what, const char *job_suffix,
                         const char *log)
{
    s->text = NULL;
    char *abs_run =
        r->run_dir[0] == '/' ? strdup(r->run_dir) : kv_path_join(r->workdir, r->run_dir);
    s->f = abs_run ? open_memstream(&s->text, &s->len) : NULL;
    if (!s->f) {
        free(abs_run);
        return false;
    }
    fprintf(s->f, "#!/bin/bash\n# Written by `kvbench submit slurm`: %s\n", what);
    fprintf(s->f, "#SBATCH --job-name=kvbench-%s%s\n", r->run_name, job_suffix);
    put_sbatch_path(s->f, "output", abs_run, log);
    fprintf(s->f, "#SBATCH --open-mode=append\n");
    put_sbatch_path(s->f, "chdir", r->workdir, "");
    free(abs_run);
    return true;
}

/* The script's text, or NULL when a write failed. */
static char *script_end(script *s)
{
    bool bad = ferror(s->f);
    if (fclose(s->f) != 0 || bad) {
        free(s->text);
        return NULL;
    }
    return s->text;
}

char *kb_slurm_array_script(const kb_slurm_run *r)
{
    char what[512];
    snprintf(what, sizeof what,
             "the %ld shards of run %s, one array task each.\n"
             "# Task i runs `kvbench run --shard i/%ld` into %s/shards/i-of-%ld/. A task\n"
             "# that is cancelled, requeued, preempted or killed with its node runs again\n"
             "# (--requeue) and resumes its shard from its files: nothing is lost or done\n"
             "# twice. Each attempt is recorded in slurm/attempts/<i>.tsv.",
             r->n_shards, r->run_dir, r->n_shards, r->run_dir, r->n_shards);
    script s;
    if (!script_begin(&s, r, what, "", "/slurm/logs/shard-%a.log"))
        return NULL;
    FILE *f = s.f;
    fprintf(f, "#SBATCH --array=0-%ld\n#SBATCH --requeue\n", r->n_shards - 1);
    fprintf(f, "set -u\n"
               "shard=${SLURM_ARRAY_TASK_ID:?this script is a task of a Slurm job array}\n"
               "attempts=");
    put_word(f, r->run_dir);
    fprintf(f, "/slurm/attempts/$shard.tsv\n"
               "printf 'start\\t%%s\\t%%s\\t%%s\\n' \"$(date +%%s)\" "
               "\"${SLURMD_NODENAME:-$(hostname)}\" \"${SLURM_JOB_ID:-}\" >>\"$attempts\"\n"
               "# Slurm stops a task with SIGTERM to each of its processes: kvbench ends\n"
               "# after the sample in flight, and this script waits to record the attempt.\n"
               "trap 'echo \"kvbench: shard $shard: stop requested, finishing the sample in "
               "flight\" >&2' TERM\n");
    put_word(f, r->kvbench);
    fputs(" run", f);
    for (const char *const *a = r->run_args; *a; a++) {
        fputc(' ', f);
        put_word(f, *a);
    }
    fprintf(f,
            " --shard \"$shard/%ld\" &\n"
            "run=$!\n"
            "while :; do\n"
            "    wait \"$run\"\n"
            "    rc=$?\n"
            "    kill -0 \"$run\" 2>/dev/null || break\n"
            "done\n"
            "printf 'end\\t%%s\\t%%s\\n' \"$(date +%%s)\" \"$rc\" >>\"$attempts\"\n"
            "exit \"$rc\"\n",
            r->n_shards);
    return script_end(&s);
}

char *kb_slurm_finish_script(const kb_slurm_run *r)
{
    char what[512];
    snprintf(what, sizeof what,
             "once every shard of run %s has finished\n"
             "# (--dependency=afterok on the array), joins them into one run and reports it.",
             r->run_dir);
    script s;
    if (!script_begin(&s, r, what, "-finish", "/slurm/logs/finish.log"))
        return NULL;
    FILE *f = s.f;
    fputs("set -eu\n", f);
    if (r->n_shards > 1) { /* one shard is the whole run: nothing to join */
        put_word(f, r->kvbench);
        fputs(" merge ", f);
        put_word(f, r->run_dir);
        fputc('\n', f);
    }
    put_word(f, r->kvbench);
    fputs(" report ", f);
    put_word(f, r->run_dir);
    if (r->baseline) {
        fputs(" --baseline ", f);
        put_word(f, r->baseline);
        fputs(" --fail-on-regression", f);
    }
    fputc('\n', f);
    return script_end(&s);
}

static int write_script(const char *run_dir, const char *name, char *text, kv_error *err)
{
    char *path = kb_slurm_path(run_dir, name);
    int rc = path && text ? kv_write_atomic(path, text, strlen(text), err)
                          : kv_fail(err, "out of memory");
    free(path);
    free(text);
    return rc;
}

int kb_slurm_write_scripts(const kb_slurm_run *r, kv_error *err)
{
    static const char *const dirs[] = {"logs", "attempts"};
    for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++) {
        char *dir = kb_slurm_path(r->run_dir, dirs[k]);
        int rc = dir ? kv_mkdirs(dir, err) : kv_fail(err, "out of memory");
        free(dir);
        if (rc < 0)
            return -1;
    }
    if (write_script(r->run_dir, "array.sbatch", kb_slurm_array_script(r), err) < 0)
        return -1;
    return write_script(r->run_dir, "finish.sbatch", kb_slurm_finish_script(r), err);
}

/* The last line of a program's complaint, without its newline, for quoting. */
static void last_line(const char *text, char *out, size_t n)
{
    size_t len = strlen(text);
    while (len && isspace((unsigned char)text[len - 1]))
        len--;
    size_t start = len;
    while (start && text[start - 1] != '\n')
        start--;
    snprintf(out, n, "%.*s", (int)(len - start), text + start);
}

int kb_sbatch(const char *const *opts, const char *script, char *id, size_t n, kv_error *err)
{
    size_t n_opts = 0;
    while (opts[n_opts])
        n_opts++;
    const char **argv = calloc(n_opts + 4, sizeof *argv);
    if (!argv)
        return kv_fail(err, "out of memory");
    argv[0] = "sbatch";
    argv[1] = "--parsable";
    memcpy(argv + 2, opts, n_opts * sizeof *argv);
    argv[n_opts + 2] = script;
    kb_proc_output o;
    int rc = kb_proc_run(argv, &o, err);
    free(argv);
    if (rc == 1)
        return kv_fail(err, "sbatch not found on PATH: submit from a machine with Slurm's client "
                            "commands (apt-get install slurm-client), or give --dry-run to "
                            "write the scripts only");
    if (rc < 0)
        return -1;
    /* --parsable prints "ID" or "ID;CLUSTER" */
    size_t digits = strspn(o.out, "0123456789");
    if (o.status != 0 || digits == 0 || digits >= n) {
        char why[512];
        last_line(o.status != 0 && o.errs[0] ? o.errs : o.out, why, sizeof why);
        rc = o.status != 0 ? kv_fail(err, "sbatch refused %s: \"%s\"", script, why)
                           : kv_fail(err, "sbatch printed no job id for %s: \"%s\"", script, why);
    } else {
        snprintf(id, n, "%.*s", (int)digits, o.out);
    }
    kb_proc_output_free(&o);
    return rc;
}

int kb_slurm_jobs_write(const char *run_dir, const char *const *ids, size_t n_ids, kv_error *err)
{
    char text[512] = "";
    size_t len = 0;
    for (size_t k = 0; k < n_ids && len < sizeof text; k++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s\n", ids[k]);
    char *path = kb_slurm_path(run_dir, "jobs");
    int rc = path ? kv_write_atomic(path, text, strlen(text), err) : kv_fail(err, "out of memory");
    free(path);
    return rc;
}

/* Whether word (a job id) is one of the lines of list. */
static bool has_line(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; *p;) {
        const char *end = strchrnul(p, '\n');
        if ((size_t)(end - p) == n && strncmp(p, word, n) == 0)
            return true;
        p = *end ? end + 1 : end;
    }
    return false;
}

int kb_slurm_jobs_queued(const char *run_dir, char *queued, size_t n, kv_error *err)
{
    queued[0] = '\0';
    char *path = kb_slurm_path(run_dir, "jobs");
    char *ids = NULL;
    size_t len;
    kv_error missing;
    int rc = path && kv_file_exists(path) ? kv_file_read(path, &ids, &len, err) : 0;
    free(path);
    if (rc < 0 || !ids)
        return rc; /* never submitted from here */
    /* %F: a job array's id for each of its tasks, a job's own id otherwise */
    char user[32];
    snprintf(user, sizeof user, "--user=%ld", (long)getuid());
    const char *argv[] = {"squeue", "--noheader", "--format=%F", user, NULL};
    kb_proc_output o;
    rc = kb_proc_run(argv, &o, &missing);
    if (rc != 0 || o.status != 0) {
        char why[512] = "squeue not found on PATH";
        if (rc == 0)
            last_line(o.errs, why, sizeof why);
        if (rc == 0)
            kb_proc_output_free(&o);
        free(ids);
        return kv_fail(err, "cannot tell whether the jobs of the last submission still run: %s",
                       why);
    }
    for (char *line = strtok(ids, "\n"); line; line = strtok(NULL, "\n"))
        if (has_line(o.out, line) && strlen(queued) + strlen(line) + 2 < n)
            strcat(strcat(queued, queued[0] ? " " : ""), line);
    kb_proc_output_free(&o);
    free(ids);
    return 0;
}

long kb_slurm_cpus_per_task(void)
{
    const char *s = getenv("SLURM_CPUS_PER_TASK");
    char *end;
    long n = s ? strtol(s, &end, 10) : 0;
    return s && end != s && *end == '\0' && n > 0 && n <= 4096 ? n : 0;
}

/* Adds node to a "n1,n2" list unless it is its last entry already. */
static void add_node(char *nodes, size_t n, const char *node)
{
    const char *last = strrchr(nodes, ',');
    last = last ? last + 1 : nodes;
    if (strcmp(last, node) == 0)
        return;
    size_t len = strlen(nodes);
    snprintf(nodes + len, n - len, "%s%s", len ? "," : "", node);
}

/* Splits line at its tabs, in place, into at most max fields; returns how
 * many there were (more than max: max + 1). */
static int split_tabs(char *line, char **fields, int max)
{
    int n = 0;
    for (char *p = line;; p++) {
        if (n == max)
            return max + 1;
        fields[n++] = p;
        p = strchrnul(p, '\t');
        if (!*p)
            return n;
        *p = '\0';
    }
}

/* A UNIX time or exit status as the scripts write them: decimal digits. */
static bool get_count(const char *s, long *out)
{
    char *end;
    if (!isdigit((unsigned char)*s))
        return false;
    errno = 0;
    *out = strtol(s, &end, 10);
    return !*end && errno == 0;
}

/* One record; false when the line is none. *start: the open attempt's
 * start time, -1 when none is open. */
static bool add_record(char *line, kb_slurm_attempts *a, long *start)
{
    char *f[5];
    int n = split_tabs(line, f, 4);
    long t, status;
    if (n == 4 && strcmp(f[0], "start") == 0 && get_count(f[1], &t) && f[2][0]) {
        a->started++;
        *start = t;
        add_node(a->nodes, sizeof a->nodes, f[2]);
        return true;
    }
    if (n == 3 && strcmp(f[0], "end") == 0 && get_count(f[1], &t) && get_count(f[2], &status) &&
        *start >= 0 && t >= *start) {
        a->ended++;
        a->seconds += (double)(t - *start);
        *start = -1;
        return true;
    }
    return false;
}

int kb_slurm_attempts_parse(char *text, const char *path, kb_slurm_attempts *a, kv_error *err)
{
    memset(a, 0, sizeof *a);
    long start = -1, line_no = 0;
    for (char *line = text; *line;) {
        char *end = strchrnul(line, '\n');
        bool last = !*end;
        *end = '\0';
        line_no++;
        if (!add_record(line, a, &start))
            return kv_fail(err,
                           "%s:%ld: not an attempt record (\"start\\tTIME\\tNODE\\tJOB\" or "
                           "\"end\\tTIME\\tSTATUS\" after a start)",
                           path, line_no);
        line = last ? end : end + 1;
    }
    return 0;
}

int kb_slurm_attempts_read(const char *run_dir, long shard, kb_slurm_attempts *a, kv_error *err)
{
    memset(a, 0, sizeof *a);
    char name[64];
    snprintf(name, sizeof name, "attempts/%ld.tsv", shard);
    char *path = kb_slurm_path(run_dir, name);
    char *text = NULL;
    size_t len;
    int rc = !path                  ? kv_fail(err, "out of memory")
             : kv_file_exists(path) ? kv_file_read(path, &text, &len, err)
                                    : 0;
    if (rc == 0 && text)
        rc = kb_slurm_attempts_parse(text, path, a, err);
    free(text);
    free(path);
    return rc;
}
