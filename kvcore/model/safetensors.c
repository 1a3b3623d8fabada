#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"

/* A header larger than this is not a model header but an attack or garbage
 * (real headers are a few hundred KB); it bounds the allocation. */
#define MAX_HEADER_BYTES (256u << 20)

static const struct {
    const char *name;
    size_t size;
    kv_dtype dtype;
} dtypes[] = {
    {"F32", 4, KV_DTYPE_F32},    {"F16", 2, KV_DTYPE_F16},       {"BF16", 2, KV_DTYPE_BF16},
    {"F64", 8, KV_DTYPE_OTHER},  {"I64", 8, KV_DTYPE_OTHER},     {"I32", 4, KV_DTYPE_OTHER},
    {"I16", 2, KV_DTYPE_OTHER},  {"I8", 1, KV_DTYPE_OTHER},      {"U64", 8, KV_DTYPE_OTHER},
    {"U32", 4, KV_DTYPE_OTHER},  {"U16", 2, KV_DTYPE_OTHER},     {"U8", 1, KV_DTYPE_OTHER},
    {"BOOL", 1, KV_DTYPE_OTHER}, {"F8_E4M3", 1, KV_DTYPE_OTHER}, {"F8_E5M2", 1, KV_DTYPE_OTHER},
};

size_t kv_dtype_size(const char *name)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return dtypes[i].size;
    return 0;
}

static kv_dtype dtype_of(const char *name)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return dtypes[i].dtype;
    return KV_DTYPE_OTHER;
}

/* A JSON number that is an exact non-negative integer below 2^53 (cJSON keeps
 * numbers as doubles; larger values would already have lost precision). */
static int json_uint(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return -1;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static int parse_shape(const cJSON *shape, kv_st_tensor *t, uint64_t *count, const char *path,
                       kv_error *err)
{
    if (!cJSON_IsArray(shape))
        return kv_fail(err, "%s: tensor '%s': \"shape\" is not an array", path, t->name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > KV_ST_MAX_DIMS)
        return kv_fail(err, "%s: tensor '%s' has %d dimensions (at most %d supported)", path,
                       t->name, nd, KV_ST_MAX_DIMS);
    t->n_dims = nd;
    *count = 1;
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        uint64_t v;
        if (json_uint(d, &v) != 0)
            return kv_fail(err, "%s: tensor '%s': shape[%d] is not a non-negative integer", path,
                           t->name, i);
        if (v != 0 && *count > UINT64_MAX / v)
            return kv_fail(err, "%s: tensor '%s': shape overflows", path, t->name);
        *count *= v;
        t->shape[i] = (int64_t)v;
    }
    return 0;
}

static int parse_tensor(const cJSON *e, size_t data_start, size_t data_size, const char *path,
                        kv_st_tensor *t, kv_error *err)
{
    if (!cJSON_IsObject(e))
        return kv_fail(err, "%s: header entry '%s' is not an object", path, t->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !shape || !offs)
        return kv_fail(err, "%s: tensor '%s' lacks \"dtype\", \"shape\" or \"data_offsets\"", path,
                       t->name);
    size_t elsize = kv_dtype_size(dt->valuestring);
    if (elsize == 0)
        return kv_fail(err, "%s: tensor '%s' has unknown dtype '%.16s'", path, t->name,
                       dt->valuestring);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dt->valuestring);
    t->dtype = dtype_of(dt->valuestring);
    uint64_t count = 0;
    if (parse_shape(shape, t, &count, path, err) != 0)
        return -1;
    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        json_uint(cJSON_GetArrayItem(offs, 0), &begin) != 0 ||
        json_uint(cJSON_GetArrayItem(offs, 1), &end) != 0)
        return kv_fail(err, "%s: tensor '%s': \"data_offsets\" is not [begin, end]", path, t->name);
    if (begin > end || end > data_size)
        return kv_fail(err,
                       "%s: tensor '%s': data_offsets [%llu, %llu] lie outside the %zu data "
                       "bytes (file truncated?)",
                       path, t->name, (unsigned long long)begin, (unsigned long long)end,
                       data_size);
    if (count > UINT64_MAX / elsize || end - begin != count * elsize)
        return kv_fail(err, "%s: tensor '%s': %llu bytes of data for %llu elements of %s", path,
                       t->name, (unsigned long long)(end - begin), (unsigned long long)count,
                       t->dtype_name);
    t->offset = data_start + (size_t)begin;
    t->nbytes = (size_t)(end - begin);
    return 0;
}

static int cmp_offset(const void *a, const void *b)
{
    const kv_st_tensor *x = a, *y = b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Tensors of one file must not share bytes: overlapping ranges mean a
 * corrupt or crafted header. */
static int check_overlaps(const kv_st_tensor *t, int n, const char *path, kv_error *err)
{
    if (n < 2)
        return 0;
    kv_st_tensor *s = malloc((size_t)n * sizeof *s);
    if (!s)
        return kv_fail(err, "%s: out of memory", path);
    memcpy(s, t, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_offset);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++)
        if (s[i - 1].offset + s[i - 1].nbytes > s[i].offset && s[i].nbytes > 0)
            rc = kv_fail(err, "%s: tensors '%s' and '%s' overlap", path, s[i - 1].name, s[i].name);
    free(s);
    return rc;
}

int kv_safetensors_parse_header(const char *json, size_t len, size_t data_start, size_t data_size,
                                const char *path, int file, kv_st_tensor **tensors, int *n,
                                kv_error *err)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root)
        return kv_fail(err, "%s: header is not valid JSON", path);
    int rc = 0, first = *n;
    if (!cJSON_IsObject(root)) {
        rc = kv_fail(err, "%s: header is not a JSON object", path);
        goto done;
    }
    int count = cJSON_GetArraySize(root);
    kv_st_tensor *grown = realloc(*tensors, (size_t)(*n + count + 1) * sizeof *grown);
    if (!grown) {
        rc = kv_fail(err, "%s: out of memory for %d tensors", path, count);
        goto done;
    }
    *tensors = grown;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!e->string) {
            rc = kv_fail(err, "%s: header entry without a name", path);
            break;
        }
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        kv_st_tensor *t = &(*tensors)[*n];
        memset(t, 0, sizeof *t);
        t->file = file;
        if (e->string[0] == '\0') {
            rc = kv_fail(err, "%s: a tensor has an empty name", path);
            break;
        }
        t->name = strdup(e->string);
        if (!t->name) {
            rc = kv_fail(err, "%s: out of memory", path);
            break;
        }
        (*n)++;
        if ((rc = parse_tensor(e, data_start, data_size, path, t, err)) != 0)
            break;
    }
    if (rc == 0)
        rc = check_overlaps(*tensors + first, *n - first, path, err);
done:
    cJSON_Delete(root);
    return rc;
}

/* Reads the header of one file and appends its tensors. */
static int open_file(kv_safetensors *st, const char *path, kv_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    int rc = -1;
    char *hdr = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        kv_fail(err, "%s: not a regular file", path);
        goto done;
    }
    size_t size = (size_t)sb.st_size;
    uint8_t lenbuf[8];
    if (size < 8) {
        kv_fail(err, "%s: file is truncated (%zu bytes, no header length)", path, size);
        goto done;
    }
    if (kv_file_pread(fd, lenbuf, 8, 0, path, err) != 0)
        goto done;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lenbuf[i];
    if (hlen > size - 8 || hlen > MAX_HEADER_BYTES) {
        kv_fail(err,
                "%s: header length %llu does not fit the %zu-byte file (truncated or not "
                "safetensors)",
                path, (unsigned long long)hlen, size);
        goto done;
    }
    hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        kv_fail(err, "%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen);
        goto done;
    }
    if (kv_file_pread(fd, hdr, (size_t)hlen, 8, path, err) != 0)
        goto done;
    char **files = realloc(st->files, (size_t)(st->n_files + 1) * sizeof *files);
    if (!files) {
        kv_fail(err, "%s: out of memory", path);
        goto done;
    }
    st->files = files;
    if (!(st->files[st->n_files] = strdup(path))) {
        kv_fail(err, "%s: out of memory", path);
        goto done;
    }
    st->n_files++;
    rc = kv_safetensors_parse_header(hdr, (size_t)hlen, 8 + (size_t)hlen, size - 8 - (size_t)hlen,
                                     path, st->n_files - 1, &st->tensors, &st->n_tensors, err);
done:
    free(hdr);
    close(fd);
    return rc;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const kv_st_tensor *)a)->name, ((const kv_st_tensor *)b)->name);
}

static int sort_and_check_unique(kv_safetensors *st, kv_error *err)
{
    if (st->n_tensors > 1)
        qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_name);
    for (int i = 1; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return kv_fail(err, "%s: tensor '%s' appears twice", st->files[st->tensors[i].file],
                           st->tensors[i].name);
    return 0;
}

/* A shard name from an index must be a plain file name in the folder. */
static int plain_file_name(const char *s)
{
    return s[0] != '\0' && s[0] != '.' && !strchr(s, '/');
}

/* Opens the shards named by model.safetensors.index.json. Every tensor of the
 * weight_map must be in the shard it names; shards' other tensors are kept. */
static int open_index(kv_safetensors *st, const char *dir, const char *index, kv_error *err)
{
    char *text;
    size_t len;
    if (kv_file_read(index, &text, &len, err) != 0)
        return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = 0;
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        rc = kv_fail(err, "%s: not JSON with a \"weight_map\" object", index);
        goto done;
    }
    for (const cJSON *e = map->child; e && rc == 0; e = e->next) {
        if (!cJSON_IsString(e) || !plain_file_name(e->valuestring)) {
            rc = kv_fail(err, "%s: weight_map entry '%s' is not a file name in the folder", index,
                         e->string ? e->string : "?");
            break;
        }
        int seen = 0;
        for (int f = 0; f < st->n_files && !seen; f++) {
            const char *base = strrchr(st->files[f], '/');
            seen = strcmp(base ? base + 1 : st->files[f], e->valuestring) == 0;
        }
        if (seen)
            continue;
        char *path = kv_path_join(dir, e->valuestring);
        rc = path ? open_file(st, path, err) : kv_fail(err, "out of memory");
        free(path);
    }
    if (rc == 0)
        rc = sort_and_check_unique(st, err);
    for (const cJSON *e = map->child; e && rc == 0; e = e->next) {
        const kv_st_tensor *t = kv_safetensors_find(st, e->string);
        const char *base = t ? strrchr(st->files[t->file], '/') : NULL;
        if (!t || strcmp(base ? base + 1 : st->files[t->file], e->valuestring) != 0)
            rc = kv_fail(err, "%s: tensor '%s' is not in %s", index, e->string, e->valuestring);
    }
done:
    cJSON_Delete(root);
    return rc;
}

int kv_safetensors_open(const char *dir, kv_safetensors **out, kv_error *err)
{
    *out = NULL;
    kv_safetensors *st = calloc(1, sizeof *st);
    char *single = kv_path_join(dir, "model.safetensors");
    char *index = kv_path_join(dir, "model.safetensors.index.json");
    int rc;
    if (!st || !single || !index)
        rc = kv_fail(err, "out of memory");
    else if (kv_file_exists(single))
        rc = open_file(st, single, err) == 0 ? sort_and_check_unique(st, err) : -1;
    else if (kv_file_exists(index))
        rc = open_index(st, dir, index, err);
    else
        rc = kv_fail(err, "%s: no model.safetensors or model.safetensors.index.json", dir);
    free(single);
    free(index);
    if (rc != 0) {
        kv_safetensors_free(st);
        return -1;
    }
    *out = st;
    return 0;
}

void kv_safetensors_free(kv_safetensors *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->n_files; i++)
        free(st->files[i]);
    free(st->files);
    free(st);
}

const kv_st_tensor *kv_safetensors_find(const kv_safetensors *st, const char *name)
{
    int lo = 0, hi = st->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (c == 0)
            return &st->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

int kv_safetensors_read(const kv_safetensors *st, const kv_st_tensor *t, void *dst, kv_error *err)
{
    return kv_safetensors_read_part(st, t, 0, t->nbytes, dst, err);
}

int kv_safetensors_read_part(const kv_safetensors *st, const kv_st_tensor *t, size_t from,
                             size_t n, void *dst, kv_error *err)
{
    const char *path = st->files[t->file];
    if (from > t->nbytes || n > t->nbytes - from)
        return kv_fail(err, "%s: bytes [%zu, %zu) lie outside a tensor of %zu", path, from,
                       from + n, t->nbytes);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
    int rc = kv_file_pread(fd, dst, n, t->offset + from, path, err);
    close(fd);
    return rc;
}
