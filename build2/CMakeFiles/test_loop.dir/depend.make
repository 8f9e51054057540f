# Empty dependencies file for test_loop.
# This may be replaced when dependencies are built.
