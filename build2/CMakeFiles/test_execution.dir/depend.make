# Empty dependencies file for test_execution.
# This may be replaced when dependencies are built.
