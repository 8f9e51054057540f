file(REMOVE_RECURSE
  "CMakeFiles/test_request.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_request.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_request.dir/tests/test_request.c.o"
  "CMakeFiles/test_request.dir/tests/test_request.c.o.d"
  "test_request"
  "test_request.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_request.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
