/* Fuzz target: a shard's attempt records (slurm/attempts/<i>.tsv), as
 * kvbench merge reads them for slurm/summary.txt. Either the text is
 * refused with a message, or the counts hold together: no more ends than
 * starts, no negative wall time, a node list that fits its buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/slurm.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    kb_slurm_attempts a;
    kv_error err;
    if (kb_slurm_attempts_parse(text, "attempts/0.tsv", &a, &err) == 0) {
        if (a.ended > a.started || a.seconds < 0 ||
            strnlen(a.nodes, sizeof a.nodes) == sizeof a.nodes)
            abort();
        if (a.started > 0 && !a.nodes[0])
            abort(); /* every start names its node */
    } else if (!strstr(err.msg, "attempts/0.tsv:")) {
        abort(); /* a refusal names the file and line */
    }
    free(text);
    return 0;
}
