#!/bin/sh
# trace_phases.sh: sum the per-phase lines of a -DTD_WRITER_TRACE build's
# stderr (engine/td_trace.h) by phase, over every shard and thread.
#
#   tadoc compress ... 2>trace.log; contrib/bench/trace_phases.sh trace.log
#
# Each trace line holds the wall and thread-CPU seconds since the same
# thread's previous mark, the peak RSS, the seconds since the first mark
# and the thread's id. Shard workers mark dictionary, each grammar round
# ("round"), inlining, rule layout, entries, index build, index + root
# encode and zstd sections + write; "writer start" is marked by the thread
# that adds the files, so its CPU column is that thread's reading of the
# shard before (format 5 shards defer tokenizing: the worker's "read
# (deferred)" line is its idle time, its "read+tokenize" line the
# tokenizing; a format 3/4 writer tokenizes as it reads, so there
# "read+tokenize" is idle time). Prints phase, lines, wall and CPU sums, and
# the peak RSS seen.
set -eu
awk '/^trace/ {
	p = ""
	for (i = 16; i <= NF; i++) p = p " " $i
	sub(/^ /, "", p); sub(/:.*/, "", p); gsub(/ [0-9]+.*/, "", p)
	w[p] += $2; c[p] += $5; n[p]++; if ($8 > m) m = $8
}
END {
	for (k in w) printf "%-36s %6d lines %10.2f s wall %9.2f s cpu\n", k, n[k], w[k], c[k]
	printf "peak RSS %d MB\n", m
}' "$@" | sort
