# Empty dependencies file for test_cgroup.
# This may be replaced when dependencies are built.
