# Empty dependencies file for test_error.
# This may be replaced when dependencies are built.
