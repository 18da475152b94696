# bench/lib.sh: what bench/run.sh and bench/scale.sh share.  Sourced.

# bench_percentiles: microsecond latencies on stdin -> "p50_ms p99_ms".
bench_percentiles() {
  sort -n | awk '{a[NR] = $1}
    END {if (NR == 0) print "NA NA";
         else printf "%.3f %.3f\n", a[int(NR * 0.50) + 1] / 1000, a[int(NR * 0.99) + 1] / 1000}'
}
