/* Fuzz target: scores.json as `kvbench report` reads it, then every report
 * writer over whatever rows it held (odd names, NaN-free but extreme numbers,
 * configs missing from run.json). Loading either fails with a message or the
 * writers produce output without crashing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/report.h"

static const char run_json[] =
    "{\"kvbench_version\": \"fuzz\", \"model\": \"m\", \"model_hash\": \"h\", \"protocol\": "
    "\"longbench\", \"matrix\": {\"configs\": [{\"name\": \"full\", \"hash\": \"x\", \"budget\": "
    "-1, \"params\": null}, {\"name\": \"a\", \"hash\": \"y\", \"budget\": 64, \"params\": "
    "{\"algorithm\": \"h2o\"}}, {\"name\": \"b\", \"hash\": \"z\", \"budget\": 64, \"params\": "
    "{\"algorithm\": \"snapkv\"}}], \"tasks\": []}}";

static void put(const char *dir, const char *name, const void *data, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[] = "/dev/shm/kvbfuzz-scores-XXXXXX";
    char alt[] = "/tmp/kvbfuzz-scores-XXXXXX";
    char *d = mkdtemp(dir) ? dir : mkdtemp(alt);
    if (!d)
        return 0;
    put(d, "run.json", run_json, strlen(run_json));
    put(d, "scores.json", data, size);
    kb_report_run r;
    kv_error err = {{0}};
    if (kb_report_run_load(d, &r, &err) == 0) {
        FILE *null = fopen("/dev/null", "w");
        kb_report_options opt = {.baseline = &r, .threshold = 1.0};
        kb_report_write_csv(null, &r, 1);
        kb_report_write_markdown(null, &r, 1, &opt);
        kb_report_write_html(null, &r, 1, &opt);
        fclose(null);
        kb_report_run_free(&r);
    } else if (!err.msg[0]) {
        abort();
    }
    char path[256];
    snprintf(path, sizeof path, "%s/run.json", d);
    unlink(path);
    snprintf(path, sizeof path, "%s/scores.json", d);
    unlink(path);
    rmdir(d);
    return 0;
}
