file(REMOVE_RECURSE
  "CMakeFiles/bench_scan.dir/tests/bench/bench_scan.c.o"
  "CMakeFiles/bench_scan.dir/tests/bench/bench_scan.c.o.d"
  "CMakeFiles/bench_scan.dir/tests/kb_testutil.c.o"
  "CMakeFiles/bench_scan.dir/tests/kb_testutil.c.o.d"
  "bench_scan"
  "bench_scan.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/bench_scan.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
