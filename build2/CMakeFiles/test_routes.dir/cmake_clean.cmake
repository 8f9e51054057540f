file(REMOVE_RECURSE
  "CMakeFiles/test_routes.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_routes.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_routes.dir/tests/test_routes.c.o"
  "CMakeFiles/test_routes.dir/tests/test_routes.c.o.d"
  "test_routes"
  "test_routes.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_routes.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
