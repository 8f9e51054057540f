# Empty dependencies file for bench_scan.
# This may be replaced when dependencies are built.
