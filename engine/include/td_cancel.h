/* td_cancel: stop a thread's long engine calls early (an interrupted FUSE
 * request, a daemon told to stop). */
#ifndef TD_CANCEL_H
#define TD_CANCEL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Make the calling thread's engine calls watch up to two flags: while
 * either points at a non-zero int, a call that spreads its work in parts
 * (the analytics of td_analytics.h and td_analytics_set.h computed on the
 * grammar, phrase counts, phrase searches and ranked files, the batches of
 * td_batch.h) stops before its next part and returns TD_ECANCELED
 * ("interrupted", errno EINTR), leaving its outputs as on any error.
 * Reads, a word's search and answers read from stored tables (a stored
 * root vector, top words or n-grams, the fuzzy index) do not look; a
 * word's count does only on a sharded archive (its shards are counted in
 * parts). Either pointer may be NULL (not watched);
 * td_cancel_watch(NULL, NULL), the default, watches nothing.
 *
 * The flags are read, never written, by any of the call's threads (its
 * workers inherit the caller's flags); they must stay valid until the
 * watch is replaced. Set one from any thread or from a signal handler
 * (a plain store to a volatile int). Thread-local: other threads' calls
 * are not affected. */
void td_cancel_watch(const volatile int *a, const volatile int *b);

/* Non-zero when a flag the calling thread watches is set. Thread-safe. */
int td_cancel_requested(void);

#ifdef __cplusplus
}
#endif
#endif
