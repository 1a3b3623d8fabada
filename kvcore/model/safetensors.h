/* safetensors: the tensor files of a Hugging Face model folder.
 *
 * A file is a little-endian u64 header length, a JSON header naming every
 * tensor's dtype, shape and byte range, then the data. The header is parsed
 * with cJSON and every field is checked against the file before anything is
 * read: a truncated or hostile file is an error naming the file and tensor,
 * never an out-of-bounds read. A folder holds either model.safetensors or
 * model.safetensors.index.json plus the shards its weight_map names.
 *
 * Data is read into memory by the caller (kv_safetensors_read), never mapped.
 */
#ifndef KV_SAFETENSORS_H
#define KV_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef enum kv_dtype {
    KV_DTYPE_F32,
    KV_DTYPE_F16,
    KV_DTYPE_BF16,
    KV_DTYPE_OTHER, /* a valid safetensors dtype the engine does not compute with */
} kv_dtype;

#define KV_ST_MAX_DIMS 8

typedef struct kv_st_tensor {
    char *name;
    char dtype_name[8]; /* as written in the header: "BF16", "I64"... */
    kv_dtype dtype;
    int n_dims;
    int64_t shape[KV_ST_MAX_DIMS];
    size_t offset; /* absolute byte offset in its file */
    size_t nbytes;
    int file; /* index into kv_safetensors.files */
} kv_st_tensor;

typedef struct kv_safetensors {
    char **files; /* paths of the files, [n_files] */
    int n_files;
    kv_st_tensor *tensors; /* sorted by name, [n_tensors] */
    int n_tensors;
} kv_safetensors;

/* Opens the safetensors of a model folder (single file or sharded index) and
 * validates every header. */
int kv_safetensors_open(const char *dir, kv_safetensors **out, kv_error *err);
void kv_safetensors_free(kv_safetensors *st);

/* The tensor called name, or NULL. */
const kv_st_tensor *kv_safetensors_find(const kv_safetensors *st, const char *name);

/* Reads a tensor's bytes (t->nbytes of them) into dst. */
int kv_safetensors_read(const kv_safetensors *st, const kv_st_tensor *t, void *dst, kv_error *err);

/* Reads bytes [from, from + n) of a tensor into dst (dst[0] is byte from):
 * pieces of a large tensor can be read by several threads at once. */
int kv_safetensors_read_part(const kv_safetensors *st, const kv_st_tensor *t, size_t from,
                             size_t n, void *dst, kv_error *err);

/* Parses one header (json[0..len), not NUL-terminated) of a file whose data
 * section is data_size bytes long starting at file offset data_start, and
 * appends its tensors to *tensors / *n (a realloc'd array). `path` names the
 * file in errors; `file` is stored in each tensor. Exposed for fuzzing. */
int kv_safetensors_parse_header(const char *json, size_t len, size_t data_start, size_t data_size,
                                const char *path, int file, kv_st_tensor **tensors, int *n,
                                kv_error *err);

/* Bytes per element of a dtype name ("BF16" -> 2), 0 when unknown. */
size_t kv_dtype_size(const char *name);

#endif
