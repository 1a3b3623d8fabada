/* kvbench fetch: LongBench's data.zip or a model's files from the Hugging
 * Face hub (or a mirror named by HF_ENDPOINT), resumable and checked. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hub/archive.h"
#include "cli/cli.h"
#include "util/clock.h"
#include "cli/fetch.h"
#include "util/file.h"
#include "hub/hub.h"

#define LONGBENCH_REPO    "THUDM/LongBench"
#define LONGBENCH_V2_REPO "THUDM/LongBench-v2"

static const kb_option options[] = {
    {"output", "DIR",
     "where to put the files (default datasets/longbench, datasets/longbench-v2, models/NAME)"},
    {"dir", "DIR", "the same as --output (its old spelling)"},
    {"revision", "REV", "branch, tag or commit of the hub repository (default: main)"},
    {"offline", NULL, "use only files already downloaded (also HF_HUB_OFFLINE=1)"},
    {"retries", "N", "attempts after a failed transfer, with backoff (default 5)"},
    {NULL, NULL, NULL},
};

/* --output DIR, or its old spelling --dir; NULL: the default. */
static const char *destination(const kb_args *a)
{
    return kb_arg(a, "output") ? kb_arg(a, "output") : kb_arg(a, "dir");
}

/* ---- progress ----------------------------------------------------------------- */

/* On a terminal: one redrawn line per file with size, speed and ETA. In a
 * log: nothing until the file's summary line. */
typedef struct progress {
    bool tty;
    double start, last_draw;
    uint64_t first_done; /* bytes already there when the transfer began (resume) */
    bool drawn;
    char name[128];
} progress;

static void human(uint64_t bytes, char *out, size_t n)
{
    const char *unit[] = {"B", "KB", "MB", "GB", "TB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1000 && u < 4)
        v /= 1000, u++;
    snprintf(out, n, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static void on_progress(void *ctx, const char *name, uint64_t done, uint64_t total)
{
    progress *p = ctx;
    double t = kv_clock_s();
    if (!p->tty)
        return;
    if (strcmp(p->name, name) != 0) { /* a new file */
        snprintf(p->name, sizeof p->name, "%s", name);
        p->start = t;
        p->first_done = done;
        p->last_draw = 0;
    }
    if (t - p->last_draw < 0.2 && !(total && done == total))
        return;
    p->last_draw = t;
    double rate = t > p->start ? (double)(done - p->first_done) / (t - p->start) : 0;
    char d[32], tot[32], r[32], eta[32] = "--:--";
    human(done, d, sizeof d);
    human(total, tot, sizeof tot);
    human((uint64_t)rate, r, sizeof r);
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 0;
    if (total && rate > 0) {
        long s = (long)((double)(total - done) / rate);
        snprintf(eta, sizeof eta, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    }
    char bar[21];
    for (int i = 0; i < 20; i++)
        bar[i] = i < pct / 5 ? '#' : '.';
    bar[20] = '\0';
    fprintf(stderr, "\r\033[K%-28.28s [%s] %3d%% %s/%s %s/s ETA %s", name, bar, pct, d, tot, r,
            eta);
    p->drawn = true;
}

static void end_progress_line(progress *p)
{
    if (p->tty && p->drawn)
        fputs("\r\033[K", stderr);
    p->drawn = false;
    p->name[0] = '\0';
}

/* ---- downloading one file -------------------------------------------------------- */

typedef struct fetch_ctx {
    lb_hub hub;
    progress bar;
    lb_repo_kind kind;
    const char *repo;
    const char *revision;
    const char *dir;
} fetch_ctx;

/* Downloads FILE of the repository into dir/FILE and prints one line about
 * it. Returns 0, LB_HUB_NOT_FOUND (reported only when !optional) or -1. */
static int fetch_file(fetch_ctx *f, const char *file, bool optional)
{
    char *url = lb_hub_file_url(&f->hub, f->kind, f->repo, f->revision, file);
    char *dest = kv_path_join(f->dir, file);
    if (!url || !dest) {
        free(url);
        free(dest);
        kb_error("out of memory");
        return -1;
    }
    lb_hub_result r;
    kv_error err;
    int rc = lb_hub_download(&f->hub, url, dest, NULL, &r, &err);
    end_progress_line(&f->bar);
    if (rc == 0) {
        char size[32];
        human(r.bytes, size, sizeof size);
        printf("%-40s %10s  %s%s\n", dest, size,
               r.cached    ? "already there"
               : r.resumed ? "resumed"
                           : "downloaded",
               r.verified ? ", sha256 ok" : "");
    } else if (rc == LB_HUB_NOT_FOUND && optional) {
        printf("%-40s %10s  not in the repository (optional)\n", dest, "-");
    } else {
        kb_error("%s", err.msg);
    }
    fflush(stdout);
    free(url);
    free(dest);
    return rc;
}

/* A retry is news: without it a dead network looks like a hang. */
static void on_retry(void *ctx, const char *why, int attempt, int attempts, double wait_s)
{
    end_progress_line(ctx);
    fprintf(stderr, "kvbench: fetch: %s; attempt %d of %d failed, retrying in %.0f s\n", why,
            attempt, attempts, wait_s);
}

/* The hub with its defaults (HF_ENDPOINT, HF_HUB_OFFLINE) and the progress
 * line on a terminal. */
static void setup_hub(fetch_ctx *f, const char *revision)
{
    lb_hub_init(&f->hub);
    f->bar.tty = isatty(2);
    f->hub.progress = on_progress;
    f->hub.progress_ctx = &f->bar;
    f->hub.on_retry = on_retry;
    f->hub.retry_ctx = &f->bar;
    f->revision = revision ? revision : "main";
}

static int setup(fetch_ctx *f, const kb_args *a)
{
    setup_hub(f, kb_arg(a, "revision"));
    if (kb_flag(a, "offline"))
        f->hub.offline = true;
    long retries = f->hub.retries;
    if (kb_arg_long(a, "retries", 0, 100, &retries) < 0)
        return -1;
    f->hub.retries = (int)retries;
    return 0;
}

/* ---- kvbench fetch longbench ----------------------------------------------------------- */

static int fetch_longbench(const kb_args *a)
{
    fetch_ctx f = {.kind = LB_REPO_DATASET, .repo = LONGBENCH_REPO};
    if (setup(&f, a) < 0)
        return KB_EXIT_USAGE;
    f.dir = destination(a) ? destination(a) : "datasets/longbench";
    if (fetch_file(&f, "data.zip", false) != 0)
        return KB_EXIT_FAIL;
    char *zip = kv_path_join(f.dir, "data.zip");
    kv_error err;
    size_t n = 0;
    int rc = zip ? lb_unzip(zip, f.dir, &n, &err) : kv_fail(&err, "out of memory");
    free(zip);
    if (rc < 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    printf("unpacked %zu files into %s/data (use --dir %s/data)\n", n, f.dir, f.dir);
    return KB_EXIT_OK;
}

/* LongBench v2 is one JSON array, data.json, read as it is. */
static int fetch_longbench_v2(const kb_args *a)
{
    fetch_ctx f = {.kind = LB_REPO_DATASET, .repo = LONGBENCH_V2_REPO};
    if (setup(&f, a) < 0)
        return KB_EXIT_USAGE;
    f.dir = destination(a) ? destination(a) : "datasets/longbench-v2";
    if (fetch_file(&f, "data.json", false) != 0)
        return KB_EXIT_FAIL;
    printf("LongBench v2 ready in %s/data.json (use --dir %s)\n", f.dir, f.dir);
    return KB_EXIT_OK;
}

/* ---- kvbench fetch model ORG/NAME ----------------------------------------------------- */

/* The shard file names of a safetensors index, each once, in first-seen order. */
static int fetch_shards(fetch_ctx *f)
{
    char *path = kv_path_join(f->dir, "model.safetensors.index.json");
    char *text = NULL;
    size_t len;
    kv_error err;
    int rc = path ? kv_file_read(path, &text, &len, &err) : kv_fail(&err, "out of memory");
    cJSON *idx = rc == 0 ? cJSON_ParseWithLength(text, len) : NULL;
    cJSON *map = idx ? cJSON_GetObjectItemCaseSensitive(idx, "weight_map") : NULL;
    if (rc == 0 && !cJSON_IsObject(map))
        rc = kv_fail(&err, "%s: no \"weight_map\" object", path);
    if (rc < 0)
        kb_error("%s", err.msg);
    for (cJSON *e = rc == 0 ? map->child : NULL; e && rc == 0; e = e->next) {
        if (!cJSON_IsString(e) || strstr(e->valuestring, "..") || e->valuestring[0] == '/') {
            kb_error("%s: weight_map[\"%s\"] is not a file name", path, e->string);
            rc = -1;
            break;
        }
        bool seen = false;
        for (cJSON *p = map->child; p != e && !seen; p = p->next)
            seen = strcmp(p->valuestring, e->valuestring) == 0;
        if (!seen)
            rc = fetch_file(f, e->valuestring, false) == 0 ? 0 : -1;
    }
    cJSON_Delete(idx);
    free(text);
    free(path);
    return rc;
}

/* A model's files into f->dir, each reported on a line. 0 or -1 (reported). */
static int model_files(fetch_ctx *f)
{
    static const char *const required[] = {"config.json", "tokenizer.json",
                                           "tokenizer_config.json"};
    int rc = 0;
    for (size_t i = 0; i < 3 && rc == 0; i++)
        rc = fetch_file(f, required[i], false);
    if (rc == 0 && fetch_file(f, "generation_config.json", true) == -1)
        rc = -1;
    if (rc == 0) {
        /* Sharded checkpoints have an index; single-file ones do not. */
        int idx = fetch_file(f, "model.safetensors.index.json", true);
        rc = idx == 0                  ? fetch_shards(f)
             : idx == LB_HUB_NOT_FOUND ? fetch_file(f, "model.safetensors", false)
                                       : -1;
    }
    if (rc == 0)
        printf("model ready in %s\n", f->dir);
    return rc == 0 ? 0 : -1;
}

static int fetch_model(const kb_args *a)
{
    if (a->n_positional < 2) {
        kb_error("fetch model: which model? e.g. kvbench fetch model Qwen/Qwen3-0.6B");
        return KB_EXIT_USAGE;
    }
    const char *repo = a->positional[1];
    const char *slash = strchr(repo, '/');
    if (!slash || !slash[1] || strchr(slash + 1, '/') || strstr(repo, "..")) {
        kb_error("fetch model: \"%s\" is not a hub model name (ORG/NAME)", repo);
        return KB_EXIT_USAGE;
    }
    fetch_ctx f = {.kind = LB_REPO_MODEL, .repo = repo};
    if (setup(&f, a) < 0)
        return KB_EXIT_USAGE;
    char *def = kv_path_join("models", slash + 1);
    f.dir = destination(a) ? destination(a) : def;
    int rc = model_files(&f);
    free(def);
    return rc == 0 ? KB_EXIT_OK : KB_EXIT_FAIL;
}

int kb_fetch_model(const char *repo, const char *revision, const char *dir)
{
    fetch_ctx f = {.kind = LB_REPO_MODEL, .repo = repo, .dir = dir};
    setup_hub(&f, revision);
    return model_files(&f);
}

static int run(const kb_args *a)
{
    const char *what = a->positional[0];
    if (strcmp(what, "longbench") == 0) {
        if (a->n_positional > 1) {
            kb_error("fetch longbench takes no further arguments");
            return KB_EXIT_USAGE;
        }
        return fetch_longbench(a);
    }
    if (strcmp(what, "longbench-v2") == 0) {
        if (a->n_positional > 1) {
            kb_error("fetch longbench-v2 takes no further arguments");
            return KB_EXIT_USAGE;
        }
        return fetch_longbench_v2(a);
    }
    if (strcmp(what, "model") == 0)
        return fetch_model(a);
    kb_error("fetch: unknown target \"%s\" (known: longbench, longbench-v2, model)", what);
    return KB_EXIT_USAGE;
}

const kb_command kb_cmd_fetch = {
    .name = "fetch",
    .summary = "download LongBench data or a model from the Hugging Face hub",
    .usage = "kvbench fetch longbench|longbench-v2|model [ORG/NAME] [options]",
    .description =
        "`fetch longbench` downloads data.zip of the THUDM/LongBench dataset and unpacks it\n"
        "(DIR/data/<task>.jsonl); `fetch longbench-v2` gets THUDM/LongBench-v2's data.json.\n"
        "`fetch model ORG/NAME` downloads config.json, the tokenizer files and the\n"
        "safetensors weights (every shard listed in the index).\n"
        "Interrupted downloads resume; files are checked against the hub's sha256 where it\n"
        "gives one. HF_ENDPOINT selects a mirror, HF_TOKEN authenticates (never printed).",
    .options = options,
    .min_positional = 1,
    .max_positional = 2,
    .run = run,
};
