file(REMOVE_RECURSE
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_client.c.o"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_client.c.o.d"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_http.c.o"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_http.c.o.d"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_run.c.o"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_run.c.o.d"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve.c.o"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve.c.o.d"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve_flags.c.o"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve_flags.c.o.d"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve_values.c.o"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_cli_serve_values.c.o.d"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_main.c.o"
  "CMakeFiles/kernelbridge_cli.dir/src/cli/kb_main.c.o.d"
  "kernelbridge"
  "kernelbridge.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/kernelbridge_cli.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
