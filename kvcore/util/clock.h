/* The clocks kvbench measures with: durations come from the monotonic clock
 * (wall-clock time jumps with NTP), CPU time from the process clock. */
#ifndef KV_CLOCK_H
#define KV_CLOCK_H

/* Seconds on the monotonic clock, from an arbitrary origin: subtract two. */
double kv_clock_s(void);

/* CPU seconds the whole process (every thread) has used. */
double kv_clock_cpu_s(void);

#endif
