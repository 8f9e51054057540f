file(REMOVE_RECURSE
  "CMakeFiles/test_proctree.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_proctree.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_proctree.dir/tests/test_proctree.c.o"
  "CMakeFiles/test_proctree.dir/tests/test_proctree.c.o.d"
  "test_proctree"
  "test_proctree.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_proctree.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
