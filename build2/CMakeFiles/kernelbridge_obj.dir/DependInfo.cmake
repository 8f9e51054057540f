
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/build2/generated/kb_console_files.c" "CMakeFiles/kernelbridge_obj.dir/generated/kb_console_files.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/generated/kb_console_files.c.o.d"
  "/work/main/src/kernel/kb_cgroup.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_cgroup.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_cgroup.c.o.d"
  "/work/main/src/kernel/kb_cgroup_parse.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_cgroup_parse.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_cgroup_parse.c.o.d"
  "/work/main/src/kernel/kb_kernel.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel.c.o.d"
  "/work/main/src/kernel/kb_kernel_adopt.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel_adopt.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel_adopt.c.o.d"
  "/work/main/src/kernel/kb_kernel_io.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel_io.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel_io.c.o.d"
  "/work/main/src/kernel/kb_kernel_query.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel_query.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel_query.c.o.d"
  "/work/main/src/kernel/kb_kernel_user.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel_user.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernel_user.c.o.d"
  "/work/main/src/kernel/kb_kernelspec.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernelspec.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernelspec.c.o.d"
  "/work/main/src/kernel/kb_kernelspec_launch.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernelspec_launch.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernelspec_launch.c.o.d"
  "/work/main/src/kernel/kb_kernelspecs.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernelspecs.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_kernelspecs.c.o.d"
  "/work/main/src/kernel/kb_launch.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_launch.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_launch.c.o.d"
  "/work/main/src/kernel/kb_proctree.c" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_proctree.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/kernel/kb_proctree.c.o.d"
  "/work/main/src/server/kb_conns.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_conns.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_conns.c.o.d"
  "/work/main/src/server/kb_console.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_console.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_console.c.o.d"
  "/work/main/src/server/kb_e2b.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_e2b.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_e2b.c.o.d"
  "/work/main/src/server/kb_http.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_http.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_http.c.o.d"
  "/work/main/src/server/kb_jupyter.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_jupyter.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_jupyter.c.o.d"
  "/work/main/src/server/kb_jupyter_sessions.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_jupyter_sessions.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_jupyter_sessions.c.o.d"
  "/work/main/src/server/kb_jupyter_ws.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_jupyter_ws.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_jupyter_ws.c.o.d"
  "/work/main/src/server/kb_metrics_http.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_metrics_http.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_metrics_http.c.o.d"
  "/work/main/src/server/kb_router.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_router.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_router.c.o.d"
  "/work/main/src/server/kb_routes.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_routes.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_routes.c.o.d"
  "/work/main/src/server/kb_server.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_server.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_server.c.o.d"
  "/work/main/src/server/kb_ws.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_ws.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_ws.c.o.d"
  "/work/main/src/server/kb_ws_handshake.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_ws_handshake.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_ws_handshake.c.o.d"
  "/work/main/src/server/kb_ws_loop.c" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_ws_loop.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/server/kb_ws_loop.c.o.d"
  "/work/main/src/service/durable/kb_persist.c" "CMakeFiles/kernelbridge_obj.dir/src/service/durable/kb_persist.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/durable/kb_persist.c.o.d"
  "/work/main/src/service/durable/kb_restore.c" "CMakeFiles/kernelbridge_obj.dir/src/service/durable/kb_restore.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/durable/kb_restore.c.o.d"
  "/work/main/src/service/engine/kb_call.c" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_call.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_call.c.o.d"
  "/work/main/src/service/engine/kb_dispatch.c" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_dispatch.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_dispatch.c.o.d"
  "/work/main/src/service/engine/kb_engine.c" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_engine.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_engine.c.o.d"
  "/work/main/src/service/engine/kb_engine_dirs.c" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_engine_dirs.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_engine_dirs.c.o.d"
  "/work/main/src/service/engine/kb_error.c" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_error.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_error.c.o.d"
  "/work/main/src/service/engine/kb_request.c" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_request.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_request.c.o.d"
  "/work/main/src/service/engine/kb_service.c" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_service.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_service.c.o.d"
  "/work/main/src/service/engine/kb_vanished.c" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_vanished.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/engine/kb_vanished.c.o.d"
  "/work/main/src/service/jupyter/kb_hub.c" "CMakeFiles/kernelbridge_obj.dir/src/service/jupyter/kb_hub.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/jupyter/kb_hub.c.o.d"
  "/work/main/src/service/ops/kb_limits.c" "CMakeFiles/kernelbridge_obj.dir/src/service/ops/kb_limits.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/ops/kb_limits.c.o.d"
  "/work/main/src/service/ops/kb_metrics.c" "CMakeFiles/kernelbridge_obj.dir/src/service/ops/kb_metrics.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/ops/kb_metrics.c.o.d"
  "/work/main/src/service/ops/kb_pool.c" "CMakeFiles/kernelbridge_obj.dir/src/service/ops/kb_pool.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/ops/kb_pool.c.o.d"
  "/work/main/src/service/output/kb_procstore.c" "CMakeFiles/kernelbridge_obj.dir/src/service/output/kb_procstore.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/output/kb_procstore.c.o.d"
  "/work/main/src/service/output/kb_result_doc.c" "CMakeFiles/kernelbridge_obj.dir/src/service/output/kb_result_doc.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/output/kb_result_doc.c.o.d"
  "/work/main/src/service/output/kb_runlog.c" "CMakeFiles/kernelbridge_obj.dir/src/service/output/kb_runlog.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/output/kb_runlog.c.o.d"
  "/work/main/src/service/output/kb_stream.c" "CMakeFiles/kernelbridge_obj.dir/src/service/output/kb_stream.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/output/kb_stream.c.o.d"
  "/work/main/src/service/run/kb_adapter.c" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_adapter.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_adapter.c.o.d"
  "/work/main/src/service/run/kb_context.c" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_context.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_context.c.o.d"
  "/work/main/src/service/run/kb_context_view.c" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_context_view.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_context_view.c.o.d"
  "/work/main/src/service/run/kb_execution.c" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_execution.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_execution.c.o.d"
  "/work/main/src/service/run/kb_result.c" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_result.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_result.c.o.d"
  "/work/main/src/service/run/kb_run.c" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_run.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_run.c.o.d"
  "/work/main/src/service/run/kb_run_table.c" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_run_table.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/service/run/kb_run_table.c.o.d"
  "/work/main/src/state/kb_db.c" "CMakeFiles/kernelbridge_obj.dir/src/state/kb_db.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/state/kb_db.c.o.d"
  "/work/main/src/state/kb_statedir.c" "CMakeFiles/kernelbridge_obj.dir/src/state/kb_statedir.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/state/kb_statedir.c.o.d"
  "/work/main/src/util/kb_alloc.c" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_alloc.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_alloc.c.o.d"
  "/work/main/src/util/kb_buf.c" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_buf.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_buf.c.o.d"
  "/work/main/src/util/kb_clock.c" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_clock.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_clock.c.o.d"
  "/work/main/src/util/kb_loop.c" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_loop.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_loop.c.o.d"
  "/work/main/src/util/kb_prom.c" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_prom.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_prom.c.o.d"
  "/work/main/src/util/kb_utf8.c" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_utf8.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_utf8.c.o.d"
  "/work/main/src/util/kb_vec.c" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_vec.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/util/kb_vec.c.o.d"
  "/work/main/src/wire/kb_replay.c" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_replay.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_replay.c.o.d"
  "/work/main/src/wire/kb_scan.c" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_scan.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_scan.c.o.d"
  "/work/main/src/wire/kb_wire.c" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_wire.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_wire.c.o.d"
  "/work/main/src/wire/kb_wire_json.c" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_wire_json.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_wire_json.c.o.d"
  "/work/main/src/wire/kb_wsmsg.c" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_wsmsg.c.o" "gcc" "CMakeFiles/kernelbridge_obj.dir/src/wire/kb_wsmsg.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
