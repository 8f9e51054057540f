file(REMOVE_RECURSE
  "CMakeFiles/test_service.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_service.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_service.dir/tests/test_service.c.o"
  "CMakeFiles/test_service.dir/tests/test_service.c.o.d"
  "test_service"
  "test_service.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_service.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
