file(REMOVE_RECURSE
  "CMakeFiles/test_db.dir/tests/kb_testutil.c.o"
  "CMakeFiles/test_db.dir/tests/kb_testutil.c.o.d"
  "CMakeFiles/test_db.dir/tests/test_db.c.o"
  "CMakeFiles/test_db.dir/tests/test_db.c.o.d"
  "test_db"
  "test_db.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_db.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
