/* kvbench version: the build and the libraries it runs on, so a result can be
 * traced to the code that made it. */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <utf8proc.h>
#include <zip.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "cli/cli.h"
#include "cli/memory.h"
#include "cli/version.h"
#include "model/attn_dnnl.h"
#include "model/cpu.h"
#include "model/gemm_dnnl.h"

static const kb_option options[] = {
    {"libraries", NULL, "also list the versions of the libraries kvbench uses"},
    {NULL, NULL, NULL},
};

static int run(const kb_args *a)
{
    printf("kvbench %s (%s)\n", KB_VERSION, KB_GIT_VERSION);
    if (!kb_flag(a, "libraries"))
        return KB_EXIT_OK;
    char pcre[64] = "?";
    pcre2_config(PCRE2_CONFIG_VERSION, pcre);
    printf("cJSON %s\n", cJSON_Version());
    printf("%s\n", curl_version());
    printf("%s\n", OpenSSL_version(OPENSSL_VERSION));
    printf("PCRE2 %s\n", pcre);
    printf("utf8proc %s\n", utf8proc_version());
    printf("libzip %s\n", zip_libzip_version());
    printf("OpenBLAS %s\n", openblas_get_config());
    /* The kernels' level: the CPU's best, or the lower one KVBENCH_ISA asks for. */
    kv_error err;
    if (kv_isa_init(&err) != 0) {
        kb_error("%s", err.msg);
        return KB_EXIT_FAIL;
    }
    printf("kernels %s (CPU: %s; built with -march=%s; %s=avx2|avx512|avx512bf16 forces a "
           "lower level)\n",
           kv_isa_name(kv_isa_active()), kv_isa_name(kv_isa_detected()), KB_BUILD_MARCH,
           KV_ISA_ENV);
    char dnnl[256];
    kv_dnnl_describe(dnnl, sizeof dnnl);
    printf("%s\n", dnnl);
    /* Which code multiplies prefill's matrices in each compute mode (decode's
     * GEMV is always kvbench's own kernels). */
    printf("prefill matmul: f32 mode %s; bf16 mode %s\n",
           kv_dnnl_usable(KV_DTYPE_F32) ? "oneDNN f32" : "OpenBLAS sgemm (16-bit weights widened)",
           kv_dnnl_usable(KV_DTYPE_BF16)
               ? "oneDNN bf16 x bf16 -> f32"
               : "OpenBLAS sgemm on weights widened to F32 (exact for BF16 values)");
    /* Prefill attention's Q K^T and P V (decode attention is kvbench's own). */
    printf("prefill attention: f32 mode OpenBLAS sgemm; bf16 mode %s\n",
           kv_attn_dnnl_usable()
               ? "oneDNN bf16 x bf16 -> f32 (probabilities rounded to BF16; with statistics, "
                 "each row's exact softmax), OpenBLAS sgemm over layers with gaps"
               : "OpenBLAS sgemm (BF16 values in F32)");
    char mem[256];
    kb_memory_describe(mem, sizeof mem);
    printf("%s\n", mem);
    return KB_EXIT_OK;
}

const kb_command kb_cmd_version = {
    .name = "version",
    .summary = "print the kvbench version (and with --libraries, its libraries')",
    .usage = "kvbench version [--libraries]",
    .options = options,
    .run = run,
};
