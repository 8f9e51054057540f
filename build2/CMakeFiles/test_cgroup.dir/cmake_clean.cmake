file(REMOVE_RECURSE
  "CMakeFiles/test_cgroup.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_cgroup.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_cgroup.dir/tests/test_cgroup.c.o"
  "CMakeFiles/test_cgroup.dir/tests/test_cgroup.c.o.d"
  "test_cgroup"
  "test_cgroup.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_cgroup.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
