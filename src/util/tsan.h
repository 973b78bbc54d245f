/*
 * ThreadSanitizer annotations. A remote peer's RDMA access to registered memory is
 * DMA-like: the application orders it through its own protocol with the peer (another
 * process, invisible to TSan), never through synchronisation inside this process. The
 * copies that perform such accesses are therefore hidden from TSan; the ordering
 * swverbs itself promises (data placed before the CQE and the counter update) runs
 * through the CQ lock and release/acquire counters, which TSan still checks.
 */
#ifndef SWV_UTIL_TSAN_H
#define SWV_UTIL_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define SWV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SWV_TSAN 1
#endif
#endif

#ifdef SWV_TSAN
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define SWV_REMOTE_ACCESS_BEGIN() __tsan_ignore_thread_begin()
#define SWV_REMOTE_ACCESS_END()   __tsan_ignore_thread_end()
#else
#define SWV_REMOTE_ACCESS_BEGIN() ((void)0)
#define SWV_REMOTE_ACCESS_END()   ((void)0)
#endif

#endif
