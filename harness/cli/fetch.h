/* Downloads from the Hugging Face hub (harness/cli/cmd_fetch.c), for commands
 * that need a model they do not have yet. */
#ifndef KB_FETCH_H
#define KB_FETCH_H

/* A hub model's config, tokenizer and weights into dir, resumable and
 * checked, each file reported on stdout and progress on a terminal, as
 * `kvbench fetch model REPO --dir DIR` does. revision NULL: "main".
 * Returns 0, or -1 after reporting what failed. */
int kb_fetch_model(const char *repo, const char *revision, const char *dir);

#endif
