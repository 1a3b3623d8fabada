/* The kvbench binary's command-line contract: help, subcommand list, exit
 * codes and error format (issue 2). */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>

#include "cli/memory.h"
#include "support/testutil.h"
#include "util/mem.h"

static const char *const subcommands[] = {
    "run", "score", "report", "fetch", "generate", "tokenize", "bench", "version", NULL,
};

Test(cli, help_lists_every_subcommand)
{
    tu_result r = tu_kvbench("--help", NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    for (int i = 0; subcommands[i]; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "\n  %s ", subcommands[i]);
        cr_expect(strstr(r.out, needle), "--help lacks '%s':\n%s", subcommands[i], r.out);
    }
    tu_result_free(&r);
}

Test(cli, no_arguments_is_a_usage_error)
{
    tu_result r = tu_kvbench(NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.out, "usage: kvbench"));
    tu_result_free(&r);
}

Test(cli, unknown_command_exits_2_with_prefixed_error)
{
    tu_result r = tu_kvbench("frobnicate", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert_eq(strncmp(r.err, "kvbench: ", 9), 0, "stderr: %s", r.err);
    cr_assert(strstr(r.err, "'frobnicate'"));
    tu_result_free(&r);
}

Test(cli, version_prints_version)
{
    tu_result r = tu_kvbench("version", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(strncmp(r.out, "kvbench 0.", 10), 0, "stdout: %s", r.out);
    tu_result_free(&r);
    r = tu_kvbench("version", "--libraries", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "OpenBLAS"));
    cr_assert(strstr(r.out, "cJSON"));
    cr_assert(strstr(r.out, "OpenSSL 3."), "%s", r.out);
    tu_result_free(&r);
}

Test(cli, command_help_lists_options)
{
    tu_result r = tu_kvbench("version", "--help", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "usage: kvbench version"));
    cr_assert(strstr(r.out, "--libraries"));
    tu_result_free(&r);
    r = tu_kvbench("help", "version", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "--libraries"));
    tu_result_free(&r);
}

Test(cli, unknown_option_names_the_option)
{
    tu_result r = tu_kvbench("version", "--frob", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "kvbench: version: unknown option '--frob'"), "stderr: %s", r.err);
    tu_result_free(&r);
}

Test(cli, flag_with_value_is_rejected)
{
    tu_result r = tu_kvbench("version", "--libraries=yes", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "takes no value"), "stderr: %s", r.err);
    tu_result_free(&r);
}

Test(cli, extra_positional_is_rejected)
{
    tu_result r = tu_kvbench("version", "extra", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "unexpected argument 'extra'"), "stderr: %s", r.err);
    tu_result_free(&r);
}

Test(cli, unimplemented_commands_say_so_and_exit_2)
{
    /* Every listed command either runs its --help (exit 0) or is marked as
     * not implemented and refuses with exit 2 — never a silent success. */
    tu_result h = tu_kvbench("--help", NULL);
    for (int i = 0; subcommands[i]; i++) {
        tu_result r = tu_kvbench(subcommands[i], "--help", NULL);
        char marker[128];
        snprintf(marker, sizeof marker, "\n  %s ", subcommands[i]);
        const char *line = strstr(h.out, marker);
        cr_assert(line);
        const char *eol = strchr(line + 1, '\n');
        int pending = strstr(line, "[not implemented yet]") &&
                      strstr(line, "[not implemented yet]") < eol;
        if (pending) {
            cr_expect_eq(r.status, 2, "%s", subcommands[i]);
            cr_expect(strstr(r.err, "not implemented yet"), "%s: %s", subcommands[i], r.err);
        } else {
            cr_expect_eq(r.status, 0, "%s --help: %s", subcommands[i], r.err);
            cr_expect(strstr(r.out, "usage: kvbench"), "%s", subcommands[i]);
        }
        tu_result_free(&r);
    }
    tu_result_free(&h);
}

/* Issue 28: the help names the kinds `bench` has (it once named a
 * "loader"): the summary's list is exactly the kinds bench lists. */
Test(cli, bench_help_names_only_kinds_that_exist)
{
    tu_result h = tu_kvbench("--help", NULL), k = tu_kvbench("bench", "nosuch", NULL);
    cr_assert_eq(k.status, 2);
    const char *at = strstr(h.out, "\n  bench ");
    cr_assert(at, "%s", h.out);
    at = strstr(at, "throughput: ");
    cr_assert(at, "%s", h.out);
    at += strlen("throughput: ");
    char named[256];
    snprintf(named, sizeof named, "%.*s", (int)strcspn(at, "\n"), at);
    char listed[256] = "";
    for (const char *line = strstr(k.err, "kinds:\n"); line && (line = strstr(line, "\n  "));) {
        line += 3;
        strncat(listed, listed[0] ? ", " : "", sizeof listed - strlen(listed) - 1);
        strncat(listed, line, strcspn(line, " "));
    }
    cr_assert_str_eq(named, listed);
    tu_result_free(&h);
    tu_result_free(&k);
}

/* Each kind of bench is a command of its own: its --help lists its own
 * options (and `kvbench help bench KIND` the same), and it refuses
 * another kind's, naming the kind. */
Test(cli, bench_kinds_take_only_their_own_options)
{
    tu_result m = tu_kvbench("bench", "model", "--help", NULL),
              h = tu_kvbench("help", "bench", "model", NULL),
              s = tu_kvbench("bench", "sweep", "--help", NULL);
    cr_assert_eq(m.status, 0, "%s", m.err);
    cr_assert_eq(s.status, 0, "%s", s.err);
    cr_assert(strstr(m.out, "usage: kvbench bench model "), "%s", m.out);
    cr_assert(strstr(m.out, "\n  --warmup N ") && !strstr(m.out, "--configs"), "%s", m.out);
    cr_assert(strstr(s.out, "\n  --configs K,K,.. ") && !strstr(s.out, "--warmup"), "%s", s.out);
    cr_assert_str_eq(h.out, m.out);
    tu_result_free(&m);
    tu_result_free(&h);
    tu_result_free(&s);
    tu_result r = tu_kvbench("bench", "sweep", "--model", "x", "--warmup", "1", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert_str_eq(r.err, "kvbench: bench sweep: unknown option '--warmup' (see 'kvbench bench "
                            "sweep --help')\n");
    tu_result_free(&r);
}

static void put_script(const char *dir, const char *name, const char *body)
{
    char *path;
    cr_assert_geq(asprintf(&path, "%s/%s", dir, name), 0);
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
    free(path);
}

/* Issue 28: `./kvbench.sh run > out` leaves out holding what kvbench
 * printed (the score table), not ninja's lines, and messages on a stderr
 * that is no terminal carry no escape codes. The script runs on stand-ins
 * for dpkg-query, meson, ninja and the binary, which print what the real
 * ones print where they print it. */
Test(cli, kvbench_sh_run_keeps_stdout_for_the_table)
{
    char *dir = tu_mkdtemp(), *script = tu_source("kvbench.sh"), *cmd;
    char *text = tu_slurp(script, NULL), *copy, *bin, *harness;
    cr_assert_geq(asprintf(&copy, "%s/kvbench.sh", dir), 0);
    FILE *f = fopen(copy, "w");
    fputs(text, f);
    fclose(f);
    cr_assert_eq(chmod(copy, 0755), 0);
    cr_assert_geq(asprintf(&bin, "%s/bin", dir), 0);
    cr_assert_geq(asprintf(&harness, "%s/build/harness", dir), 0);
    cr_assert_eq(mkdir(bin, 0777), 0);
    cr_assert_geq(asprintf(&cmd, "mkdir -p '%s' && touch '%s/build/build.ninja'", harness, dir), 0);
    char *mk[] = {"/bin/sh", "-c", cmd, NULL};
    tu_result r = tu_run_argv(mk);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_result_free(&r);
    put_script(bin, "dpkg-query", "echo 'install ok installed'");
    put_script(bin, "meson", "echo 'meson: reconfigured'");
    put_script(bin, "ninja", "echo '[1/2] Compiling C object x.o'; echo '[2/2] Linking target kvbench'");
    put_script(harness, "kvbench", "echo 'progress: 1/1' >&2; echo '| config | score |'");
    free(cmd);
    cr_assert_geq(asprintf(&cmd, "PATH='%s':$PATH exec bash '%s' run c.json", bin, copy), 0);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    r = tu_run_argv(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(r.out, "| config | score |\n");
    cr_assert(strstr(r.err, "==> building build\n"), "%s", r.err);
    cr_assert(strstr(r.err, "[2/2] Linking target kvbench\n"), "%s", r.err);
    cr_assert_null(strchr(r.err, '\033'), "%s", r.err);
    tu_result_free(&r);
    tu_rmtree(dir);
    free(cmd), free(harness), free(bin), free(copy), free(text), free(script), free(dir);
}

/* kvbench restarts itself with glibc's malloc on transparent huge pages where
 * the kernel offers them (harness/cli/memory.c: decode attention over 4 KiB
 * pages was a TLB miss per cache slot), and a user's own setting stands. */
Test(cli, malloc_runs_on_huge_pages_unless_the_user_says_otherwise)
{
    char mode[32];
    kb_thp_mode(mode, sizeof mode);
    bool thp = strcmp(mode, "madvise") == 0 || strcmp(mode, "always") == 0;
    unsetenv("GLIBC_TUNABLES");
    tu_result r = tu_kvbench("version", "--libraries", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    if (thp)
        cr_expect(strstr(r.out, "memory: malloc on huge pages") &&
                      strstr(r.out, "GLIBC_TUNABLES glibc.malloc.hugetlb=1)"),
                  "THP %s:\n%s", mode, r.out);
    else
        cr_expect(strstr(r.out, "memory: malloc on 4 KiB pages"), "THP %s:\n%s", mode, r.out);
    tu_result_free(&r);
    setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0", 1);
    r = tu_kvbench("version", "--libraries", NULL);
    unsetenv("GLIBC_TUNABLES");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "memory: malloc on 4 KiB pages") &&
                  strstr(r.out, "GLIBC_TUNABLES glibc.malloc.hugetlb=0)"),
              "%s", r.out);
    tu_result_free(&r);
    /* 2 asks for hugetlbfs pages, mmapped: no heap of transparent huge pages */
    setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=2", 1);
    r = tu_kvbench("version", "--libraries", NULL);
    unsetenv("GLIBC_TUNABLES");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "memory: malloc on 4 KiB pages"), "%s", r.out);
    tu_result_free(&r);
}

/* kvcore packs its huge blocks (kv_mem_alloc_huge) exactly where kvbench's
 * malloc heap is on transparent huge pages: the tunable as glibc read it at
 * start (the environment here), and a kernel that takes the advice. */
Test(cli, kvcore_packs_huge_blocks_where_the_heap_is_on_huge_pages)
{
    char mode[32];
    kb_thp_mode(mode, sizeof mode);
    bool thp = strcmp(mode, "madvise") == 0 || strcmp(mode, "always") == 0;
    const struct {
        const char *tunables;
        bool packed;
    } cases[] = {
        {"glibc.malloc.hugetlb=1", thp},
        {"glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1", thp},
        {"glibc.malloc.hugetlb=1:glibc.malloc.tcache_count=0", thp},
        {"glibc.malloc.hugetlb=0", false},
        {"glibc.malloc.hugetlb=2", false},
    };
    char *argv[] = {"kvbench", NULL};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("GLIBC_TUNABLES", cases[i].tunables, 1); /* named: no restart */
        kb_memory_setup(argv);
        cr_expect_eq(kv_mem_heap_huge(), cases[i].packed, "%s, THP %s", cases[i].tunables, mode);
        char line[256];
        kb_memory_describe(line, sizeof line);
        cr_expect_eq(strstr(line, "malloc on huge pages") != NULL, cases[i].packed, "%s", line);
    }
    unsetenv("GLIBC_TUNABLES");
}

/* What a sample frees stays in the process for the next one (memory.c): a
 * block larger than any mmap threshold comes from the heap, and freeing more
 * than glibc's largest trim threshold at once (a sweep's forks) gives none
 * of the heap back. The blocks are never written, so they cost no memory. */
#ifndef __SANITIZE_ADDRESS__ /* ASan's allocator replaces glibc's: nothing to check there */
Test(cli, freed_memory_stays_in_the_process)
{
    setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0", 1); /* no restart */
    char *argv[] = {"kvbench", NULL};
    kb_memory_setup(argv);
    enum { BLOCKS = 40, BLOCK = 64 << 20 }; /* 2.5 GiB, above mallopt's int */
    void *p[BLOCKS];
    for (int i = 0; i < BLOCKS; i++)
        cr_assert(p[i] = malloc(BLOCK));
    struct mallinfo2 held = mallinfo2();
    cr_expect_eq(held.hblkhd, 0, "%zu bytes in mmapped blocks", held.hblkhd);
    for (int i = BLOCKS - 1; i >= 0; i--)
        free(p[i]);
    struct mallinfo2 kept = mallinfo2();
    cr_expect_geq(kept.arena, (size_t)BLOCKS * BLOCK, "heap %zu bytes after the frees, %zu before",
                  kept.arena, held.arena);
}
#endif
